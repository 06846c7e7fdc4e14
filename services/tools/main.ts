import { busOptionsFromEnv, connectBus, drainOnSignals } from '../../src/bus/connect.ts';
import { ServiceInboxPrefix } from '../../src/bus/inbox.ts';
import { replyPolicyFromBus } from '../../src/bus/reply-guard.ts';
import { createLogger } from '../../src/logging.ts';
import type { Logger } from '../../src/logging.ts';
import { createScrubber, secretsFromEnv } from '../../src/scrub/index.ts';
import { startServiceHealth } from '../../src/bus/service-health.ts';
import type { ServiceHealth } from '../../src/bus/service-health.ts';
import { notifyReady } from '../../src/ready.ts';
import { DEFAULT_TOOL_SERVICE_NAME } from '../../src/tool-sdk/index.ts';
import { BWRAP_INSTALL_HINT, SANDBOX_PATH, findProgram } from '../../src/sandbox/index.ts';
import { startToolsService, toolsConfigFromEnv } from './index.ts';
import type { ToolsConfig } from './index.ts';

/** Says once, loudly, what the sandbox configuration means: no sandbox at all, or no bwrap to run one. */
async function warnAboutSandbox(config: ToolsConfig, logger: Logger): Promise<void> {
  if (config.sandbox.kind === 'none') {
    logger.warn('AGENTBUS_UNSAFE_NO_SANDBOX=1: run_command runs commands WITHOUT a sandbox; an approved command can read this worker\'s credentials and every tenant\'s files');
    return;
  }
  if ((await findProgram(config.sandbox.bwrap, SANDBOX_PATH)) === undefined) {
    logger.warn({ bwrap: config.sandbox.bwrap }, `bubblewrap is not installed: run_command will refuse every command; ${BWRAP_INSTALL_HINT}, or set AGENTBUS_UNSAFE_NO_SANDBOX=1 to run commands without a sandbox`);
  }
  if (config.sandbox.network) logger.warn('AGENTBUS_SANDBOX_NETWORK=1: sandboxed commands may use the network');
}

/** Runs the tools service as its own process: config from the environment, drains on SIGTERM/SIGINT. */
async function main(): Promise<void> {
  // One scrubber that knows the process's secrets: for log lines, the result ledger and $SRV.STATS.
  const scrubber = createScrubber({ secrets: secretsFromEnv(process.env) });
  const logger = createLogger({ name: 'tools', level: process.env['LOG_LEVEL'] ?? 'info', scrubber });
  const bus = busOptionsFromEnv(process.env, ServiceInboxPrefix.tools);
  // Sealed when it logs in as a user; a bad AGENTBUS_TRUSTED_INBOXES stops it before it connects.
  const replyPolicy = replyPolicyFromBus(bus, process.env);
  const config = toolsConfigFromEnv(process.env, process.cwd());
  await warnAboutSandbox(config, logger);
  const nc = await connectBus({
    servers: process.env['NATS_URL'] ?? 'nats://127.0.0.1:4222',
    name: 'agentbus-tools',
    ...bus,
    logger,
  });
  let health: ServiceHealth | undefined;
  const service = await startToolsService({
    nc,
    logger,
    prefix: process.env['AGENTBUS_PREFIX'] ?? 'agentbus',
    workspace: config.workspace,
    perTenant: config.perTenant,
    hide: config.hide,
    sandbox: config.sandbox,
    statsData: () => ({ ...health?.figures() }),
    scrubber,
    replyPolicy,
  });
  health = startServiceHealth({
    nc,
    logger,
    serviceName: DEFAULT_TOOL_SERVICE_NAME,
    instanceId: service.id ?? '',
    // Alive but deaf helps no one: exit, and `agentbus up` (or the container's restart policy) starts it anew.
    onUnrecoverable: (reason) => {
      logger.fatal({ reason }, 'tools service cannot serve; exiting');
      process.exit(1);
    },
  });
  drainOnSignals(nc, logger, async () => {
    health?.stop();
    await service.stop();
  });
  logger.info({ workspace: config.workspace, perTenant: config.perTenant, hide: config.hide, sandbox: config.sandbox.kind }, 'tools service started');
  notifyReady('tools');
  const closed = await nc.closed();
  if (closed) logger.error({ err: closed }, 'connection closed with an error');
}

main().catch((err: unknown) => {
  process.stderr.write(`agentbus tools: ${err instanceof Error ? (err.stack ?? err.message) : String(err)}\n`);
  process.exitCode = 1;
});
