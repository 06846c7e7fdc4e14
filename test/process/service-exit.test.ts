import { mkdtemp, rm } from 'node:fs/promises';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { startNatsServer } from '../helpers/nats-server.ts';
import type { TestNatsServer } from '../helpers/nats-server.ts';
import { startServiceProcess } from '../helpers/service-process.ts';
import type { ServiceProcess } from '../helpers/service-process.ts';

// Issue #18: every service exits within a second of SIGTERM when idle. Each is started as `agentbus up` starts it
// (its own process, an IPC channel for the ready message), so whatever that channel holds is held here too.
const EXIT_BUDGET_MS = 1_000;
const SERVICES = ['runtime', 'provider', 'tools', 'memory', 'dashboard', 'agents', 'a2a', 'chat'] as const;
/** The agents service exposes nothing without a config: one agent, as `agentbus up --agents FILE` gives it. */
const AGENTS_CONFIG = JSON.stringify({ agents: [{ owner: 'acme', name: 'desk', tenant: 'acme', session: 'desk' }] });

let server: TestNatsServer;
let workspace: string;
const processes = new Map<string, ServiceProcess>();

beforeAll(async () => {
  server = await startNatsServer();
  workspace = await mkdtemp(join(tmpdir(), 'agentbus-exit-ws-'));
  for (const service of SERVICES) {
    processes.set(
      service,
      startServiceProcess(
        `services/${service}/main.ts`,
        { NATS_URL: server.url, AGENTBUS_WORKSPACE: workspace, AGENTBUS_DASHBOARD_PORT: '0', AGENTBUS_A2A_PORT: '0', AGENTBUS_CHAT_PORT: '0', AGENTBUS_CHAT_TOKEN: 'service-exit-test-token', LOG_LEVEL: 'warn', ...(service === 'agents' ? { AGENTBUS_AGENTS: AGENTS_CONFIG } : {}) },
        { ipc: true },
      ),
    );
  }
  await Promise.all([...processes.values()].map((started) => started.ready(60_000)));
}, 90_000);

afterAll(async () => {
  await Promise.all([...processes.values()].map((started) => started.stop('SIGKILL')));
  await server?.stop();
  if (workspace) await rm(workspace, { recursive: true, force: true });
});

describe('a service process on SIGTERM', () => {
  it.each(SERVICES)('%s exits cleanly within a second when idle', async (service) => {
    const started = processes.get(service)!;
    const sent = performance.now();
    started.child.kill('SIGTERM');
    const code = await Promise.race([started.exited, new Promise<'still running'>((resolve) => setTimeout(() => resolve('still running'), 5_000).unref())]);
    const tookMs = performance.now() - sent;
    // Shown in the run's output: the figure the issue asks for.
    process.stdout.write(`${service} exited ${Math.round(tookMs)} ms after SIGTERM\n`);
    expect(code, started.output()).toBe(0);
    expect(tookMs).toBeLessThanOrEqual(EXIT_BUDGET_MS);
  });
});
