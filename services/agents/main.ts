import { readFile } from 'node:fs/promises';
import { runService } from '../../src/service/index.ts';
import { agentsConfigFromEnv, startAgentsService } from './index.ts';

// The Synadia Agent Protocol host as its own process: the common environment of runService (NATS_USER is `agents` in
// the shipped configs; the inbox prefix defaults to _INBOX_agents), and AGENTBUS_AGENTS (the agents config: a JSON
// file's path, or the JSON itself).
await runService({
  name: 'agents',
  async start({ nc, logger, env, prefix, replyPolicy }) {
    const config = await agentsConfigFromEnv(env, (path) => readFile(path, 'utf8'));
    if (!config) throw new Error('AGENTBUS_AGENTS names no agents config: nothing to expose');
    const service = startAgentsService({ nc, logger, config, trustedInboxes: replyPolicy.trusted, prefix });
    logger.info({ agents: config.agents.length }, 'agents service started');
    return { stop: () => service.stop() };
  },
});
