import { runService } from '../../src/service/index.ts';
import { readA2aConfig, startA2aService } from './index.ts';

// The A2A server as its own process: the common environment of runService (NATS_USER `a2a` in the shipped configs),
// and AGENTBUS_A2A_PORT, AGENTBUS_A2A_HOST, AGENTBUS_A2A_TOKEN, AGENTBUS_A2A_URL, AGENTBUS_A2A_TENANT,
// AGENTBUS_A2A_MODEL, AGENTBUS_A2A_MAX_STEPS, AGENTBUS_A2A_NAME, AGENTBUS_A2A_DESCRIPTION, AGENTBUS_A2A_TURN_TIMEOUT_MS.
await runService({
  name: 'a2a',
  async start({ nc, logger, env, prefix }) {
    const service = await startA2aService({ nc, logger, prefix, config: readA2aConfig(env) });
    logger.info({ url: service.url }, `A2A server started on ${service.url}`);
    return { stop: () => service.stop(), url: service.url };
  },
});
