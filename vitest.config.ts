import { defineConfig } from 'vitest/config';

export default defineConfig({
  test: {
    include: ['test/**/*.test.ts'],
    testTimeout: 30_000,
    hookTimeout: 30_000,
    // Integration files each start their own nats-server; two cores here, so keep parallelism modest.
    maxWorkers: 2,
    pool: 'forks',
  },
});
