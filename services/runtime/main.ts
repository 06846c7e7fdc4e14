import { runService } from '../../src/service/index.ts';
import { runtimeConfigFromEnv, startRuntimeService } from './index.ts';

// The runtime service as its own process: the common environment of runService (NATS_URL may list a cluster,
// comma-separated), and that of runtimeConfigFromEnv: AGENTBUS_MODEL, AGENTBUS_MAX_STEPS, AGENTBUS_NODE_ID,
// AGENTBUS_LEASE_TTL_MS, AGENTBUS_REPLICAS, …
await runService({
  name: 'runtime',
  async start({ nc, logger, env, replyPolicy, scrubber, unrecoverable }) {
    // The runtime watches its own health (lease heartbeats, its $SRV probe): startRuntimeService starts it.
    const runtime = await startRuntimeService({ nc, logger, config: runtimeConfigFromEnv(env, logger), scrubber, replyPolicy, onUnrecoverable: unrecoverable });
    return { stop: () => runtime.stop() };
  },
});
