import { busOptionsFromEnv, connectBus, drainOnSignals } from '../../src/bus/connect.ts';
import { ServiceInboxPrefix } from '../../src/bus/inbox.ts';
import { replyPolicyFromBus } from '../../src/bus/reply-guard.ts';
import { createLogger } from '../../src/logging.ts';
import { notifyReady } from '../../src/ready.ts';
import { createScrubber, secretsFromEnv } from '../../src/scrub/index.ts';
import { runtimeConfigFromEnv, startRuntimeService } from './index.ts';

// The runtime service as its own process. Env: NATS_URL (servers comma-separated), NATS_USER, NATS_PASSWORD,
// NATS_CA/NATS_CERT/NATS_KEY (TLS), AGENTBUS_INBOX_PREFIX (default _INBOX_runtime), AGENTBUS_TRUSTED_INBOXES, AGENTBUS_PREFIX, AGENTBUS_MODEL,
// AGENTBUS_MAX_STEPS, AGENTBUS_NODE_ID, AGENTBUS_LEASE_TTL_MS, AGENTBUS_REPLICAS, LOG_LEVEL (and the rest of runtimeConfigFromEnv).
const secrets = secretsFromEnv(process.env);
const logger = createLogger({ name: 'runtime', level: process.env.LOG_LEVEL, secrets });
const bus = busOptionsFromEnv(process.env, ServiceInboxPrefix.runtime);
const nc = await connectBus({
  servers: process.env.NATS_URL ?? 'nats://127.0.0.1:4222',
  name: 'agentbus-runtime',
  logger,
  ...bus,
});
try {
  const runtime = await startRuntimeService({
    nc,
    logger,
    config: runtimeConfigFromEnv(process.env, logger),
    scrubber: createScrubber({ secrets, logger }),
    // Sealed when it logs in as a user; a bad AGENTBUS_TRUSTED_INBOXES is fatal here.
    replyPolicy: replyPolicyFromBus(bus, process.env),
    // Alive but deaf helps no one: exit, and `agentbus up` (or the container's restart policy) starts a new node.
    onUnrecoverable: (reason) => {
      logger.fatal({ reason }, 'runtime node cannot serve; exiting');
      process.exit(1);
    },
  });
  drainOnSignals(nc, logger, () => runtime.stop());
  notifyReady('runtime');
} catch (err) {
  logger.fatal({ err }, 'runtime failed to start');
  await nc.close();
  process.exitCode = 1;
}
