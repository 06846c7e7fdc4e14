import { busCredentialsFromEnv, connectBus, drainOnSignals } from '../../src/bus/connect.ts';
import { createLogger } from '../../src/logging.ts';
import { notifyReady } from '../../src/ready.ts';
import { startToolsService } from './index.ts';

/** Runs the tools service as its own process: config from the environment, drains on SIGTERM/SIGINT. */
async function main(): Promise<void> {
  const logger = createLogger({ name: 'tools', level: process.env['LOG_LEVEL'] ?? 'info' });
  const nc = await connectBus({
    servers: process.env['NATS_URL'] ?? 'nats://127.0.0.1:4222',
    name: 'agentbus-tools',
    ...busCredentialsFromEnv(process.env),
    logger,
  });
  const service = await startToolsService({
    nc,
    logger,
    prefix: process.env['AGENTBUS_PREFIX'] ?? 'agentbus',
    workspace: process.env['AGENTBUS_WORKSPACE'] ?? process.cwd(),
  });
  drainOnSignals(nc, logger, () => service.stop());
  logger.info('tools service started');
  notifyReady('tools');
  const closed = await nc.closed();
  if (closed) logger.error({ err: closed }, 'connection closed with an error');
}

main().catch((err: unknown) => {
  process.stderr.write(`agentbus tools: ${err instanceof Error ? (err.stack ?? err.message) : String(err)}\n`);
  process.exitCode = 1;
});
