import { readFileSync, readdirSync } from 'node:fs';
import { mkdtemp, readFile, rm } from 'node:fs/promises';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { pino } from 'pino';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { createToolClient } from '../../src/bus/tool-client.ts';
import type { ToolClient } from '../../src/bus/tool-client.ts';
import { createCodec, createSubjects } from '../../src/protocol/index.ts';
import type { ToolCallReply } from '../../src/protocol/index.ts';
import { useNatsServer } from '../helpers/nats-fixture.ts';
import { toolCallRequest } from '../helpers/run-tool.ts';
import { startServiceProcess } from '../helpers/service-process.ts';
import type { ServiceProcess } from '../helpers/service-process.ts';

// The tools service as its own process (services/tools/main.ts), configured from its environment as a deployment
// would be, with a marker in that environment standing for its NATS password and provider keys.

const nats = useNatsServer();
const MARKER = `worker-secret-${process.pid}-${Date.now()}`;
let workspace: string;
let tools: ServiceProcess;
let client: ToolClient;

function call(tenant: string, name: string, args: unknown): Promise<ToolCallReply> {
  return client.call({ ...toolCallRequest(name, args, 20_000), tenant }, {});
}

function stdoutOf(reply: ToolCallReply): string {
  if (!reply.ok) throw new Error(`expected success, got ${reply.error.code}: ${reply.error.message}`);
  return (reply.output as { stdout: string }).stdout;
}

beforeAll(async () => {
  workspace = await mkdtemp(join(tmpdir(), 'agentbus-tools-process-'));
  tools = startServiceProcess('services/tools/main.ts', { NATS_URL: nats.server.url, AGENTBUS_PREFIX: 'sp', AGENTBUS_WORKSPACE: workspace, AGENTBUS_TEST_MARKER: MARKER });
  await tools.waitFor('tools service started');
  client = createToolClient({ nc: nats.nc, subjects: createSubjects('sp'), codec: createCodec(), logger: pino({ level: 'silent' }) });
}, 30_000);

afterAll(async () => {
  await tools?.stop();
  await rm(workspace, { recursive: true, force: true });
});

describe('the tools service process', () => {
  it("runs commands that cannot read the worker's environment: not through /proc/$PPID, /proc/1 or env", async () => {
    const output = stdoutOf(await call('acme', 'run_command', { command: ['sh', '-c', 'cat /proc/$PPID/environ; cat /proc/1/environ; env; ls /proc'] }));
    expect(output).not.toContain(MARKER);
    expect(output).not.toContain('NATS_URL');
    expect(output.split('\n')).not.toContain(String(tools.child.pid));
  });

  it("keeps each tenant's files apart by default: globex sees none of acme's", async () => {
    expect(await call('acme', 'write_file', { path: 'plan.md', content: 'acme plan' })).toMatchObject({ ok: true });
    expect(await readFile(join(workspace, 'acme', 'plan.md'), 'utf8')).toBe('acme plan');
    expect(await call('globex', 'read_file', { path: 'plan.md' })).toMatchObject({ ok: false, error: { code: 'not_found' } });
    expect(await call('globex', 'list_dir', {})).toMatchObject({ ok: true, output: { entries: [] } });
    expect(await call('globex', 'search_text', { pattern: 'plan' })).toMatchObject({ ok: true, output: { matches: [] } });
    expect(stdoutOf(await call('globex', 'run_command', { command: ['sh', '-c', `cat ${workspace}/acme/plan.md; ls ${workspace}`] }))).toBe('globex\n');
  });

  it('takes the sandbox down with it when the worker dies: no command outlives it', async () => {
    const marker = `${40 + (process.pid % 50)}.${Date.now() % 100_000}`;
    const running = call('acme', 'run_command', { command: ['sh', '-c', `sleep ${marker} & sleep ${marker}`], timeoutMs: 120_000 }).catch((error: unknown) => error);
    await expect.poll(() => sleepers(marker).length, { timeout: 10_000 }).toBe(2);
    await tools.stop('SIGKILL');
    await expect.poll(() => sleepers(marker).length, { timeout: 5_000 }).toBe(0);
    void running;
  });
});

describe('the tools service process without a sandbox', () => {
  it('says so at warn when it starts', async () => {
    const unsafe = startServiceProcess('services/tools/main.ts', { NATS_URL: nats.server.url, AGENTBUS_PREFIX: 'sp-unsafe', AGENTBUS_WORKSPACE: workspace, AGENTBUS_UNSAFE_NO_SANDBOX: '1' });
    try {
      await unsafe.waitFor('tools service started');
      const line = unsafe.output().split('\n').find((text) => text.includes('WITHOUT a sandbox'));
      expect(JSON.parse(line!)).toMatchObject({ level: 40 });
    } finally {
      await unsafe.stop();
    }
  });
});

/** Host pids of live `sleep <marker>` processes (a zombie waiting to be reaped counts as gone). */
function sleepers(marker: string): number[] {
  return readdirSync('/proc')
    .filter((name) => /^\d+$/.test(name))
    .filter((name) => {
      try {
        return readFileSync(`/proc/${name}/cmdline`, 'utf8') === `sleep\0${marker}\0` && !/^State:\s+Z/m.test(readFileSync(`/proc/${name}/status`, 'utf8'));
      } catch {
        return false;
      }
    })
    .map(Number);
}
