import { runService } from '../../src/service/index.ts';
import { PROVIDER_SERVICE_NAME, loadProviderConfig, startProviderService } from './index.ts';

// The provider service as its own process: the common environment of runService, AGENTBUS_SCRIPT, and the provider
// configuration: AGENTBUS_CONFIG, OPENAI_API_KEY, OPENAI_BASE_URL, ANTHROPIC_API_KEY, ANTHROPIC_BASE_URL, OLLAMA_HOST,
// AGENTBUS_MODEL, AGENTBUS_EMBED_MODEL (see docs/providers.md).
await runService({
  name: 'provider',
  async start({ nc, logger, env, prefix, replyPolicy, healthFigures }) {
    const config = await loadProviderConfig({ env });
    const service = await startProviderService({
      nc,
      logger,
      config,
      prefix,
      ...(env.AGENTBUS_SCRIPT ? { scriptPath: env.AGENTBUS_SCRIPT } : {}),
      ...(env.AGENTBUS_EMBED_MODEL?.trim() ? { embedModel: env.AGENTBUS_EMBED_MODEL.trim() } : {}),
      statsData: healthFigures,
      replyPolicy,
    });
    logger.info({ providers: service.providers, defaultModel: config.defaultModel }, 'provider service started');
    return { stop: () => service.stop(), health: { serviceName: PROVIDER_SERVICE_NAME, instanceId: service.id ?? '' } };
  },
});
