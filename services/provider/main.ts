import { busOptionsFromEnv, connectBus, drainOnSignals } from '../../src/bus/connect.ts';
import { ServiceInboxPrefix } from '../../src/bus/inbox.ts';
import { replyPolicyFromBus } from '../../src/bus/reply-guard.ts';
import { createLogger } from '../../src/logging.ts';
import { secretsFromEnv } from '../../src/scrub/index.ts';
import { notifyReady } from '../../src/ready.ts';
import { startServiceHealth } from '../../src/bus/service-health.ts';
import type { ServiceHealth } from '../../src/bus/service-health.ts';
import { PROVIDER_SERVICE_NAME, loadProviderConfig, startProviderService } from './index.ts';

// The provider service as its own process. Env: NATS_URL, NATS_USER, NATS_PASSWORD, NATS_CA/NATS_CERT/NATS_KEY (TLS),
// AGENTBUS_INBOX_PREFIX (default _INBOX_provider), AGENTBUS_TRUSTED_INBOXES, AGENTBUS_PREFIX, AGENTBUS_SCRIPT, LOG_LEVEL,
// and the provider configuration: AGENTBUS_CONFIG, OPENAI_API_KEY, OPENAI_BASE_URL, ANTHROPIC_API_KEY, ANTHROPIC_BASE_URL,
// OLLAMA_HOST, AGENTBUS_MODEL, AGENTBUS_EMBED_MODEL (see docs/providers.md).
const logger = createLogger({ name: 'provider', level: process.env.LOG_LEVEL, secrets: secretsFromEnv(process.env) });
const bus = busOptionsFromEnv(process.env, ServiceInboxPrefix.provider);
const nc = await connectBus({
  servers: process.env.NATS_URL ?? 'nats://127.0.0.1:4222',
  name: 'agentbus-provider',
  ...bus,
  logger,
});
try {
  const config = await loadProviderConfig({ env: process.env });
  let health: ServiceHealth | undefined;
  const service = await startProviderService({
    nc,
    logger,
    config,
    prefix: process.env.AGENTBUS_PREFIX ?? 'agentbus',
    ...(process.env.AGENTBUS_SCRIPT ? { scriptPath: process.env.AGENTBUS_SCRIPT } : {}),
    ...(process.env.AGENTBUS_EMBED_MODEL?.trim() ? { embedModel: process.env.AGENTBUS_EMBED_MODEL.trim() } : {}),
    statsData: () => ({ ...health?.figures() }),
    // Sealed when it logs in as a user; a bad AGENTBUS_TRUSTED_INBOXES is fatal here.
    replyPolicy: replyPolicyFromBus(bus, process.env),
  });
  health = startServiceHealth({
    nc,
    logger,
    serviceName: PROVIDER_SERVICE_NAME,
    instanceId: service.id ?? '',
    // Alive but deaf helps no one: exit, and `agentbus up` (or the container's restart policy) starts it anew.
    onUnrecoverable: (reason) => {
      logger.fatal({ reason }, 'provider service cannot serve; exiting');
      process.exit(1);
    },
  });
  logger.info({ providers: service.providers, defaultModel: config.defaultModel }, 'provider service started');
  drainOnSignals(nc, logger, async () => {
    health?.stop();
    await service.stop();
  });
  notifyReady('provider');
} catch (err) {
  logger.fatal({ err }, 'provider service failed to start');
  await nc.close();
  process.exitCode = 1;
}
