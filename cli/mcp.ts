import { realpath } from 'node:fs/promises';
import { basename, isAbsolute, join } from 'node:path';
import type { DestinationStream } from 'pino';
import { createLogger } from '../src/logging.ts';
import type { Logger } from '../src/logging.ts';
import { createScrubber, secretsFromEnv } from '../src/scrub/index.ts';
import type { Scrubber } from '../src/scrub/index.ts';
import { createMcpBridge, describeMcpSource, mcpServerEnvironment, mcpSourceSecrets, openMcpSession } from '../src/mcp/index.ts';
import type { McpBridgeEvent, McpSandbox, McpSource } from '../src/mcp/index.ts';
import { BWRAP_INSTALL_HINT, SANDBOX_PATH, STATE_DIRECTORY_NAME, findProgram, realExisting, sandboxHiddenPaths } from '../src/sandbox/index.ts';
import { createCodec, createSubjects, prefixFromEnv } from '../src/protocol/index.ts';
import { createToolWorker } from '../src/tool-sdk/index.ts';
import type { AnyToolDefinition } from '../src/tool-sdk/index.ts';
import { findBus } from './bus-target.ts';
import { cliReplyPolicy, connectCli } from './connect.ts';
import { UsageError } from './context.ts';
import type { CliContext } from './context.ts';
import { createCollisionWarnings } from './mcp-collisions.ts';
import { DEFAULT_MCP_TIMEOUT_MS, mcpServiceName, parseMcp } from './mcp-options.ts';
import type { McpOptions, PerTool } from './mcp-options.ts';
import { createMcpOutput } from './mcp-output.ts';
import type { McpOutput } from './mcp-output.ts';
import { packageVersion } from './package-version.ts';
import { untilStopped } from './serving-command.ts';

/** `add (read_only), rm (privileged)`. */
function toolList(tools: readonly AnyToolDefinition[]): string {
  return tools.map((tool) => `${tool.name} (${tool.tier})`).join(', ');
}

/** The MCP server could not be started, or listed no tool that can be served. */
export class McpStartError extends Error {
  readonly server: string;
  constructor(server: string, message: string, cause?: unknown) {
    super(message, cause === undefined ? undefined : { cause });
    this.name = 'McpStartError';
    this.server = server;
  }
}

/** The `sandbox` of a stdio source under `--sandbox`: bwrap found on the system's PATH, the current directory writable but for the state folder of `agentbus up` and `AGENTBUS_WORKSPACE_HIDE`. */
export async function mcpSandboxOf(options: McpOptions, context: CliContext): Promise<{ sandbox?: McpSandbox }> {
  if (!options.sandbox || options.server.kind !== 'stdio') return {};
  const bwrap = await findProgram('bwrap', SANDBOX_PATH);
  if (bwrap === undefined) throw new McpStartError(options.server.command, `--sandbox runs the MCP server under bubblewrap, which is not installed: ${BWRAP_INSTALL_HINT}`);
  const workspace = await realpath(context.cwd);
  // As run_command does: the state folder of `agentbus up` here (its bus's token and store) and AGENTBUS_WORKSPACE_HIDE are covered.
  const hide = [join(workspace, STATE_DIRECTORY_NAME), context.stateDir, ...(context.env.AGENTBUS_WORKSPACE_HIDE ?? '').split(':').filter((path) => isAbsolute(path))];
  const hiddenPaths = await sandboxHiddenPaths(workspace, await Promise.all(hide.map((path) => realExisting(path).catch(() => path))));
  return { sandbox: { bwrap, workspace, network: options.sandbox.network, readOnlyPaths: options.sandbox.readOnlyPaths, hiddenPaths } };
}

/**
 * `agentbus mcp`: starts an MCP server over stdio (the command after `--`) or reaches one over streamable HTTP (`--url`),
 * and serves each of its tools on the bus of `--nats`, `NATS_URL` or the stack `agentbus up` runs here, as a tool
 * worker (see `createMcpBridge`), each under its MCP name after `--prefix`, until SIGINT/SIGTERM; then it leaves
 * `$SRV`, lets running calls finish (up to 5 s), closes the server and drains. At start and when the list changes it
 * says on stderr which tools a `$SRV` service of another name serves too (calls of them would go to either). What it
 * writes, a stdio server's stderr (line by line, after `[name] `) and the message of an error it ends with go through
 * the secret scrubber, with the secrets of the environment and of `--header` and `--url`. Exits 0 after a clean stop,
 * 1 when the server cannot be started or serves no tool or the connection closes under it, 2 on a usage error.
 */
export async function runMcp(argv: string[], context: CliContext): Promise<number> {
  const options = parseMcp(argv);
  const source: McpSource =
    options.server.kind === 'stdio'
      ? { ...options.server, env: mcpServerEnvironment(context.env, options.env), cwd: context.cwd, ...(await mcpSandboxOf(options, context)) }
      : options.server;
  const scrubber = createScrubber({ secrets: [...secretsFromEnv(context.env), ...mcpSourceSecrets(source)] });
  const output = createMcpOutput(context, scrubber);
  try {
    return await serveMcp(options, source, output, context, createLogger({ name: 'mcp', level: context.env.LOG_LEVEL ?? 'warn', destination: context.stderr as DestinationStream, scrubber }), scrubber);
  } catch (error) {
    // The command line prints the message: an SDK's or the system's, with the server's URL or command line in it.
    if (error instanceof Error) error.message = output.scrub(error.message);
    throw error;
  }
}

async function serveMcp(options: McpOptions, source: McpSource, output: McpOutput, context: CliContext, logger: Logger, scrubber: Scrubber): Promise<number> {
  const target = await findBus(context, options.nats);
  if (target.kind === 'none') throw new UsageError('no bus to serve on: pass --nats URL, set NATS_URL, or start a stack here with `npx agentbus up`');
  const label = describeMcpSource(source);
  const replyPolicy = cliReplyPolicy(target.env);
  const nc = await connectCli(target.url, `agentbus-mcp`, target.env, { reconnectForever: true });
  const subjects = createSubjects(prefixFromEnv(context.env));
  const codec = createCodec();
  // The server's own name unless --name says otherwise: known once the first session is open, then kept.
  let serviceName = options.name;
  // What a stdio server's stderr lines are tagged with: the service name, or the command's until that is known.
  const serverTag = () => serviceName ?? (source.kind === 'stdio' ? basename(source.command) : 'mcp');

  const prefix = options.prefix ?? '';
  // `--tier TOOL=T` and `--timeout TOOL=MS` name a tool by its MCP name or by the name it is served under.
  const byTool = <T>(values: PerTool<T>, name: string): T | undefined => values.byTool.get(name) ?? values.byTool.get(`${prefix}${name}`) ?? values.all;
  const warnOfCollisions = createCollisionWarnings({ nc, subjects, codec, logger, signal: context.signal, serviceName: () => serviceName, warn: output.warn });

  const report = (event: McpBridgeEvent): void => {
    switch (event.type) {
      case 'serving':
        for (const skipped of event.skipped) output.warn(`not serving the MCP tool ${JSON.stringify(skipped.name)}: ${skipped.reason}`);
        if (event.first) {
          const served = event.tools.map((tool) => tool.name);
          const offered = new Set([...served, ...served.map((name) => name.slice(prefix.length)), ...event.skipped.map((tool) => tool.name)]);
          for (const [flag, names] of [['--tier', options.tiers.byTool.keys()], ['--timeout', options.timeouts.byTool.keys()]] as const) {
            for (const name of names) if (!offered.has(name)) output.warn(`${flag} names ${JSON.stringify(name)}, which the MCP server does not offer`);
          }
        } else {
          output.info(`the MCP server's tools changed; serving ${event.tools.length} tool(s): ${toolList(event.tools)}`);
          void warnOfCollisions(event.tools);
        }
        return;
      case 'down':
        output.warn(`the MCP server is down (${event.error?.message ?? 'it exited'}); restarting it in ${event.retryInMs} ms (attempt ${event.attempt})`);
        return;
      case 'restarted':
        output.warn(`the MCP server is back${event.pid === undefined ? '' : ` (pid ${event.pid})`}`);
        return;
    }
  };

  const bridge = createMcpBridge({
    source,
    logger,
    open: ({ signal, onToolsChanged, onError }) =>
      openMcpSession(source, {
        signal,
        onToolsChanged,
        onError,
        client: { name: 'agentbus', version: packageVersion() },
        stderr: (line) => output.serverLine(serverTag(), line),
      }),
    serve: async (tools) => {
      serviceName ??= mcpServiceName(bridge.server?.name);
      const worker = createToolWorker({
        nc,
        subjects,
        codec,
        logger,
        tools,
        serviceName,
        version: packageVersion(),
        description: `agentbus mcp ${bridge.server?.name ?? source.kind}`,
        metadata: { mcp: source.kind, ...(bridge.server?.name ? { mcpServer: bridge.server.name } : {}) },
        // The process's scrubber, with the secrets of its environment, --header and --url: for the ledger and $SRV.STATS.
        scrubber,
        replyPolicy,
        ...(options.concurrency === undefined ? {} : { maxConcurrency: options.concurrency }),
      });
      await worker.start({ signal: context.signal });
      return worker;
    },
    tierOf: (name) => byTool(options.tiers, name),
    timeoutOf: (name) => byTool(options.timeouts, name) ?? DEFAULT_MCP_TIMEOUT_MS,
    ...(options.prefix === undefined ? {} : { prefix: options.prefix }),
    onEvent: report,
  });

  try {
    await bridge.start({ signal: context.signal });
    if (bridge.tools.length === 0) throw new McpStartError(label, `the MCP server ${label} lists no tool that agentbus can serve`);
  } catch (error) {
    await bridge.stop().catch(() => undefined);
    await nc.close().catch(() => undefined);
    if (context.signal.aborted) return 130;
    if (error instanceof McpStartError) throw error;
    throw new McpStartError(label, `could not start the MCP server ${label}: ${error instanceof Error ? error.message : String(error)}`, error);
  }
  await warnOfCollisions(bridge.tools);
  output.info(`serving ${bridge.tools.length} tool(s) of ${label} as ${serviceName ?? mcpServiceName(undefined)} on ${target.url}: ${toolList(bridge.tools)} (Ctrl-C to stop)`);
  const stopped = await untilStopped(nc, context.signal);
  if (stopped.closed) {
    output.warn(`the connection to ${target.url} closed${stopped.error ? `: ${stopped.error.message}` : ''}`);
    await bridge.stop();
    return 1;
  }
  context.stderr.write(`stopping: leaving $SRV, finishing running calls, closing the MCP server\n`);
  await bridge.stop();
  await nc.drain().catch((err: unknown) => logger.warn({ err }, 'drain failed'));
  return 0;
}
