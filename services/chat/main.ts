import { runService } from '../../src/service/index.ts';
import { readChatConfig, startChatService } from './index.ts';

// The chat gateway as its own process: the common environment of runService, and AGENTBUS_CHAT_TOKEN,
// AGENTBUS_CHAT_TENANT, AGENTBUS_CHAT_PORT, AGENTBUS_CHAT_HOST, AGENTBUS_CHAT_ORIGINS.
await runService({
  name: 'chat',
  async start({ nc, logger, env, prefix }) {
    const chat = await startChatService({ nc, logger, prefix, config: readChatConfig(env) });
    logger.info({ url: chat.url, tenant: env.AGENTBUS_CHAT_TENANT || 'default' }, `chat gateway started on ${chat.url}`);
    return { stop: () => chat.stop(), url: chat.url };
  },
});
