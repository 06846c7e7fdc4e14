import { createEmbedClient } from '../../src/bus/embed-client.ts';
import { createCodec, createSubjects } from '../../src/protocol/index.ts';
import { runService } from '../../src/service/index.ts';
import { memoryConfigFromEnv } from './config.ts';
import { MEMORY_SERVICE_NAME, startMemoryService } from './index.ts';

// The memory service as its own process: the common environment of runService, and that of memoryConfigFromEnv
// (AGENTBUS_EMBED_PROVIDER, AGENTBUS_MEMORY_*).
await runService({
  name: 'memory',
  async start({ nc, logger, env, prefix, replyPolicy, healthFigures }) {
    const config = memoryConfigFromEnv(env);
    const embedder = config.embedProvider ? createEmbedClient({ nc, codec: createCodec(), subjects: createSubjects(prefix), provider: config.embedProvider }) : undefined;
    const memory = await startMemoryService({
      nc,
      ...(embedder ? { embedder } : {}),
      logger,
      prefix,
      statsData: () => ({ ...healthFigures(), heapUsed: process.memoryUsage().heapUsed }),
      queryEmbedTimeoutMs: config.queryEmbedTimeoutMs,
      ...(config.fullTextReason ? { fullTextReason: config.fullTextReason } : {}),
      snapshots: config.snapshots,
      replicas: config.replicas,
      replyPolicy,
      stateLimits: config.state,
      tenantRate: config.tenantRate,
    });
    return {
      stop: () => memory.stop(),
      health: { serviceName: MEMORY_SERVICE_NAME, instanceId: memory.id },
      // Ready once the log read at start is indexed: a search then answers from everything logged before.
      ready: memory.caughtUp,
    };
  },
});
