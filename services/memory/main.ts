import { busOptionsFromEnv, connectBus, drainOnSignals } from '../../src/bus/connect.ts';
import { ServiceInboxPrefix } from '../../src/bus/inbox.ts';
import { replyPolicyFromBus } from '../../src/bus/reply-guard.ts';
import { startServiceHealth } from '../../src/bus/service-health.ts';
import type { ServiceHealth } from '../../src/bus/service-health.ts';
import { createLogger } from '../../src/logging.ts';
import { secretsFromEnv } from '../../src/scrub/index.ts';
import { notifyReady } from '../../src/ready.ts';
import { createEmbedClient } from '../../src/bus/embed-client.ts';
import { createCodec, createSubjects } from '../../src/protocol/index.ts';
import { memoryConfigFromEnv } from './config.ts';
import { MEMORY_SERVICE_NAME, startMemoryService } from './index.ts';

// The memory service as its own process. Env: NATS_URL, NATS_USER, NATS_PASSWORD, NATS_CA/NATS_CERT/NATS_KEY (TLS),
// AGENTBUS_INBOX_PREFIX (default _INBOX_memory), AGENTBUS_TRUSTED_INBOXES, AGENTBUS_PREFIX, LOG_LEVEL, and
// those of memoryConfigFromEnv (AGENTBUS_EMBED_PROVIDER, AGENTBUS_MEMORY_*).
const logger = createLogger({ name: 'memory', level: process.env.LOG_LEVEL, secrets: secretsFromEnv(process.env) });
const config = memoryConfigFromEnv(process.env);
const bus = busOptionsFromEnv(process.env, ServiceInboxPrefix.memory);
const nc = await connectBus({
  servers: process.env.NATS_URL ?? 'nats://127.0.0.1:4222',
  name: 'agentbus-memory',
  logger,
  ...bus,
});
try {
  let health: ServiceHealth | undefined;
  const prefix = process.env.AGENTBUS_PREFIX ?? 'agentbus';
  const embedder = config.embedProvider ? createEmbedClient({ nc, codec: createCodec(), subjects: createSubjects(prefix), provider: config.embedProvider }) : undefined;
  const memory = await startMemoryService({
    nc,
    ...(embedder ? { embedder } : {}),
    logger,
    prefix,
    statsData: () => ({ ...health?.figures(), heapUsed: process.memoryUsage().heapUsed }),
    queryEmbedTimeoutMs: config.queryEmbedTimeoutMs,
    ...(config.fullTextReason ? { fullTextReason: config.fullTextReason } : {}),
    snapshots: config.snapshots,
    replicas: config.replicas,
    // Sealed when it logs in as a user; a bad AGENTBUS_TRUSTED_INBOXES is fatal here.
    replyPolicy: replyPolicyFromBus(bus, process.env),
    stateLimits: config.state,
    tenantRate: config.tenantRate,
  });
  health = startServiceHealth({
    nc,
    logger,
    serviceName: MEMORY_SERVICE_NAME,
    instanceId: memory.id,
    // Alive but deaf helps no one: exit, and `agentbus up` (or the container's restart policy) starts it anew.
    onUnrecoverable: (reason) => {
      logger.fatal({ reason }, 'memory service cannot serve; exiting');
      process.exit(1);
    },
  });
  drainOnSignals(nc, logger, async () => {
    health?.stop();
    await memory.stop();
  });
  // Ready once the log read at start is indexed: a search then answers from everything logged before.
  await memory.caughtUp;
  notifyReady('memory');
} catch (err) {
  logger.fatal({ err }, 'memory service failed to start');
  await nc.close();
  process.exitCode = 1;
}
