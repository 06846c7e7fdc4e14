import { defineConfig } from 'vitest/config';

export default defineConfig({
  test: {
    // Three tiers (README, "Tests"): test/unit (one process, no nats-server), test/bus (in-process against a real
    // nats-server), test/process (child processes: services, the CLI, sandboxed commands, a browser). `npm test`
    // runs them all; `npm run test:unit|test:bus|test:process` one tier.
    include: ['test/**/*.test.ts'],
    testTimeout: 30_000,
    hookTimeout: 30_000,
    // Integration files each start their own nats-server; two cores here, so keep parallelism modest.
    maxWorkers: 2,
    pool: 'forks',
  },
});
