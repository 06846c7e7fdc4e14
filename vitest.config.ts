import { configDefaults, defineConfig } from 'vitest/config';

// Files named `*.quiet.test.ts` assert what a process's event loop does under load (its delay stays under 100 ms):
// a measurement that another test file's processes, scheduled on the same two cores, would spoil. `npm test` runs them
// after the rest, one file at a time (AGENTBUS_TEST_QUIET=1 selects them); every other run leaves them out.
const quiet = process.env['AGENTBUS_TEST_QUIET'] === '1';
const QUIET_FILES = 'test/**/*.quiet.test.ts';

export default defineConfig({
  test: {
    // Three tiers (README, "Tests"): test/unit (one process, no nats-server), test/bus (in-process against a real
    // nats-server), test/process (child processes: services, the CLI, sandboxed commands, a browser). `npm test`
    // runs them all; `npm run test:unit|test:bus|test:process` one tier, `npm run test:quiet` the quiet files.
    include: quiet ? [QUIET_FILES] : ['test/**/*.test.ts'],
    exclude: quiet ? [...configDefaults.exclude] : [...configDefaults.exclude, QUIET_FILES],
    testTimeout: 30_000,
    hookTimeout: 30_000,
    // Integration files each start their own nats-server; two cores here, so keep parallelism modest.
    maxWorkers: quiet ? 1 : 2,
    pool: 'forks',
  },
});
