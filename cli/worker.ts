import { basename, extname } from 'node:path';
import { parseArgs } from 'node:util';
import type { DestinationStream } from 'pino';
import { createLogger } from '../src/logging.ts';
import { createScrubber, secretsFromEnv } from '../src/scrub/index.ts';
import { createCodec, createSubjects, prefixFromEnv } from '../src/protocol/index.ts';
import { DEFAULT_TOOL_SERVICE_NAME, createToolWorker } from '../src/tool-sdk/index.ts';
import { findBus } from './bus-target.ts';
import { cliReplyPolicy, connectCli } from './connect.ts';
import { UsageError } from './context.ts';
import type { CliContext } from './context.ts';
import { packageVersion } from './package-version.ts';
import { loadToolModule } from './tool-module.ts';
import { WORKER_USAGE } from './worker-usage.ts';
import { concurrencyFlag, serviceNameFlag, untilStopped } from './serving-command.ts';

export { WORKER_USAGE };

/** The flags of `worker`. */
export interface WorkerOptions {
  readonly module: string;
  readonly nats: string | undefined;
  /** The `$SRV` service name; undefined: derived from the module's file name. */
  readonly name: string | undefined;
  readonly concurrency: number | undefined;
}

/** Parses and checks the flags of `worker`. */
export function parseWorker(argv: string[]): WorkerOptions {
  const { values, positionals } = parseArgs({
    args: argv,
    options: { nats: { type: 'string' }, name: { type: 'string' }, concurrency: { type: 'string' } },
    strict: true,
    allowPositionals: true,
  });
  if (positionals.length === 0) throw new UsageError(`worker needs a module of tools: ${WORKER_USAGE}`);
  if (positionals.length > 1) throw new UsageError(`worker takes one module, got ${positionals.length}: ${positionals.join(' ')}`);
  return { module: positionals[0]!, nats: values.nats, name: serviceNameFlag(values.name), concurrency: concurrencyFlag(values.concurrency) };
}

/** The default service name of a module: its file name without extension (`examples/text-tools.ts` → `text-tools`). */
export function serviceNameOf(file: string): string {
  const name = basename(file, extname(file)).replace(/[^A-Za-z0-9_-]/g, '-').slice(0, 64);
  return /[A-Za-z0-9]/.test(name) ? name : DEFAULT_TOOL_SERVICE_NAME;
}

/**
 * `agentbus worker <module>`: serves the tools a module exports (see `toolsOfModule`) as a tool worker on the bus of
 * `--nats`, `NATS_URL` or the stack `agentbus up` runs here, announced on `$SRV`, until SIGINT/SIGTERM; then it
 * leaves `$SRV`, lets running calls finish (up to 5 s) and drains. Exits 0 after a clean stop, 1 when the
 * connection closes under it or the module fails to load, 2 on a usage error.
 */
export async function runWorker(argv: string[], context: CliContext): Promise<number> {
  const options = parseWorker(argv);
  const { tools } = await loadToolModule(options.module, context.cwd);
  const target = await findBus(context, options.nats);
  if (target.kind === 'none') throw new UsageError('no bus to serve on: pass --nats URL, set NATS_URL, or start a stack here with `npx agentbus up`');
  const serviceName = options.name ?? serviceNameOf(options.module);
  // One scrubber that knows the process's secrets: for log lines, the result ledger and $SRV.STATS.
  const scrubber = createScrubber({ secrets: secretsFromEnv(target.env) });
  const logger = createLogger({ name: 'worker', level: context.env.LOG_LEVEL ?? 'warn', destination: context.stderr as DestinationStream, scrubber });
  const replyPolicy = cliReplyPolicy(target.env);
  const nc = await connectCli(target.url, `agentbus-worker-${serviceName}`, target.env, { reconnectForever: true });
  const worker = createToolWorker({
    nc,
    subjects: createSubjects(prefixFromEnv(context.env)),
    codec: createCodec(),
    logger,
    tools,
    serviceName,
    version: packageVersion(),
    description: `agentbus worker ${basename(options.module)}`,
    scrubber,
    replyPolicy,
    ...(options.concurrency === undefined ? {} : { maxConcurrency: options.concurrency }),
  });
  try {
    await worker.start({ signal: context.signal });
  } catch (error) {
    await nc.close().catch(() => undefined);
    if (context.signal.aborted) return 130;
    throw error;
  }
  const names = tools.map((tool) => tool.name).join(', ');
  context.stdout.write(`serving ${tools.length} tool(s) as ${serviceName} on ${target.url}: ${names} (Ctrl-C to stop)\n`);
  const stopped = await untilStopped(nc, context.signal);
  if (stopped.closed) {
    context.stderr.write(`agentbus: the connection to ${target.url} closed${stopped.error ? `: ${stopped.error.message}` : ''}\n`);
    await worker.stop();
    return 1;
  }
  context.stderr.write(`stopping: leaving $SRV, finishing running calls\n`);
  await worker.stop();
  await nc.drain().catch((err: unknown) => logger.warn({ err }, 'drain failed'));
  return 0;
}
