import { busOptionsFromEnv, connectBus, drainOnSignals } from '../../src/bus/connect.ts';
import { ServiceInboxPrefix } from '../../src/bus/inbox.ts';
import { replyPolicyFromBus } from '../../src/bus/reply-guard.ts';
import { createLogger } from '../../src/logging.ts';
import { createScrubber, secretsFromEnv } from '../../src/scrub/index.ts';
import { startServiceHealth } from '../../src/bus/service-health.ts';
import type { ServiceHealth } from '../../src/bus/service-health.ts';
import { notifyReady } from '../../src/ready.ts';
import { DEFAULT_TOOL_SERVICE_NAME } from '../../src/tool-sdk/index.ts';
import { startToolsService } from './index.ts';

/** Runs the tools service as its own process: config from the environment, drains on SIGTERM/SIGINT. */
async function main(): Promise<void> {
  // One scrubber that knows the process's secrets: for log lines, the result ledger and $SRV.STATS.
  const scrubber = createScrubber({ secrets: secretsFromEnv(process.env) });
  const logger = createLogger({ name: 'tools', level: process.env['LOG_LEVEL'] ?? 'info', scrubber });
  const bus = busOptionsFromEnv(process.env, ServiceInboxPrefix.tools);
  // Sealed when it logs in as a user; a bad AGENTBUS_TRUSTED_INBOXES stops it before it connects.
  const replyPolicy = replyPolicyFromBus(bus, process.env);
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
    workspace: process.env['AGENTBUS_WORKSPACE'] ?? process.cwd(),
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
  logger.info('tools service started');
  notifyReady('tools');
  const closed = await nc.closed();
  if (closed) logger.error({ err: closed }, 'connection closed with an error');
}

main().catch((err: unknown) => {
  process.stderr.write(`agentbus tools: ${err instanceof Error ? (err.stack ?? err.message) : String(err)}\n`);
  process.exitCode = 1;
});
