import { runService } from '../../src/service/index.ts';
import { readFileSync } from 'node:fs';
import { profilesFromEnv, runtimeConfigFromEnv, startRuntimeService } from './index.ts';

// The runtime service as its own process: the common environment of runService (NATS_URL may list a cluster,
// comma-separated), and that of runtimeConfigFromEnv: AGENTBUS_MODEL, AGENTBUS_MAX_STEPS, AGENTBUS_NODE_ID,
// AGENTBUS_LEASE_TTL_MS, AGENTBUS_REPLICAS, …
await runService({
  name: 'runtime',
  async start({ nc, logger, env, replyPolicy, scrubber, unrecoverable }) {
    // The runtime watches its own health (lease heartbeats, its $SRV probe): startRuntimeService starts it.
    // Agent profiles (AGENTBUS_PROFILES: a JSON file or inline JSON), offered as agent__/handoff__ tools per tenant.
    const profiles = profilesFromEnv(env, (path) => readFileSync(path, 'utf8'));
    const runtime = await startRuntimeService({
      nc,
      logger,
      config: runtimeConfigFromEnv(env, logger),
      scrubber,
      replyPolicy,
      onUnrecoverable: unrecoverable,
      ...(profiles ? { profiles } : {}),
    });
    return { stop: () => runtime.stop() };
  },
});
