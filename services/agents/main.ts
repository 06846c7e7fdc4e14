import { readFile } from 'node:fs/promises';
import { busOptionsFromEnv, connectBus, drainOnSignals } from '../../src/bus/connect.ts';
import { ServiceInboxPrefix } from '../../src/bus/inbox.ts';
import { TRUSTED_INBOXES_ENV, parseTrustedInboxes } from '../../src/bus/reply-guard.ts';
import { createLogger } from '../../src/logging.ts';
import { notifyReady } from '../../src/ready.ts';
import { agentsConfigFromEnv, startAgentsService } from './index.ts';

// The Synadia Agent Protocol host as its own process. Env: AGENTBUS_AGENTS (the agents config: a JSON file's path, or
// the JSON itself), NATS_URL, NATS_USER (`agents` in the shipped configs), NATS_PASSWORD, NATS_CA/NATS_CERT/NATS_KEY,
// AGENTBUS_INBOX_PREFIX (default _INBOX_agents), AGENTBUS_PREFIX, AGENTBUS_TRUSTED_INBOXES, LOG_LEVEL.
const logger = createLogger({ name: 'agents', level: process.env.LOG_LEVEL });
try {
  const config = await agentsConfigFromEnv(process.env, (path) => readFile(path, 'utf8'));
  if (!config) throw new Error('AGENTBUS_AGENTS names no agents config: nothing to expose');
  const prefix = process.env.AGENTBUS_PREFIX?.trim() || undefined;
  const trustedInboxes = parseTrustedInboxes(process.env[TRUSTED_INBOXES_ENV], prefix ? { subjectPrefix: prefix } : {});
  const nc = await connectBus({
    servers: process.env.NATS_URL ?? 'nats://127.0.0.1:4222',
    name: 'agentbus-agents',
    logger,
    ...busOptionsFromEnv(process.env, ServiceInboxPrefix.agents),
  });
  let service: ReturnType<typeof startAgentsService>;
  try {
    service = startAgentsService({ nc, logger, config, trustedInboxes, ...(prefix ? { prefix } : {}) });
  } catch (error) {
    await nc.close();
    throw error;
  }
  drainOnSignals(nc, logger, () => service.stop());
  logger.info({ agents: config.agents.length }, 'agents service started');
  notifyReady('agents');
} catch (err) {
  logger.fatal({ err }, 'agents service failed to start');
  process.exitCode = 1;
}
