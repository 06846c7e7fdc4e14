import { spawn } from 'node:child_process';
import type { ChildProcessWithoutNullStreams } from 'node:child_process';
import { mkdtemp, rm } from 'node:fs/promises';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { fileURLToPath } from 'node:url';
import { pino } from 'pino';
import { z } from 'zod';
import { describe, expect, it } from 'vitest';
import { createToolClient } from '../../src/bus/tool-client.ts';
import { toolsOfModule } from '../../cli/tool-module.ts';
import { UsageError } from '../../cli/context.ts';
import { parseWorker, serviceNameOf } from '../../cli/worker.ts';
import { SafetyTier, createCodec, createSubjects } from '../../src/protocol/index.ts';
import { defineTool, isToolDefinition } from '../../src/tool-sdk/index.ts';
import { useNatsServer } from '../helpers/nats-fixture.ts';
import { toolCallRequest } from '../helpers/run-tool.ts';
import { AGENTBUS_BIN, runAgentbus } from '../helpers/agentbus-bin.ts';
import type { AgentbusRun } from '../helpers/agentbus-bin.ts';

const ROOT = fileURLToPath(new URL('../..', import.meta.url));
const PREFIX = 'wk';

/** This process's environment without anything that would pick a bus. */
function cleanEnv(): NodeJS.ProcessEnv {
  const env: NodeJS.ProcessEnv = { ...process.env, AGENTBUS_PREFIX: PREFIX };
  for (const name of ['NATS_URL', 'NATS_USER', 'NATS_PASSWORD', 'NATS_TOKEN', 'AGENTBUS_INBOX_PREFIX', 'LOG_LEVEL']) delete env[name];
  return env;
}

/** Runs `agentbus` to its end, with no bus picked from this process's environment. */
function agentbus(args: string[], cwd = ROOT): Promise<AgentbusRun> {
  // Generous: several CLI processes start at once here, each loading TypeScript, on two shared cores.
  return runAgentbus(args, { cwd, env: cleanEnv(), timeoutMs: 60_000 });
}

const echo = defineTool({
  name: 'echo',
  description: 'Returns its text',
  parameters: z.object({ text: z.string() }),
  tier: SafetyTier.readOnly,
  timeoutMs: 1_000,
  idempotent: true,
  execute: ({ text }) => text,
});

describe('finding tools among a module\'s exports', () => {
  it('recognises what defineTool returns and nothing less', () => {
    expect(isToolDefinition(echo)).toBe(true);
    expect(isToolDefinition({ ...echo, execute: undefined })).toBe(false);
    expect(isToolDefinition({ ...echo, tier: 'admin' })).toBe(false);
    expect(isToolDefinition({ ...echo, name: 'bad name' })).toBe(false);
    expect(isToolDefinition({ ...echo, parameters: {} })).toBe(false);
    expect(isToolDefinition(null)).toBe(false);
  });

  it('takes single and array exports, default first, and counts one definition under two names once', () => {
    const other = defineTool({ ...echo, name: 'other' });
    const tools = toolsOfModule({ helper: 3, named: other, default: [echo, 'x'], again: echo }, 'mod.ts');
    expect(tools.map((tool) => tool.name)).toEqual(['echo', 'other']);
  });

  it('refuses a module without tools, and two tools of one name', () => {
    expect(() => toolsOfModule({ a: 1 }, 'mod.ts')).toThrow(UsageError);
    expect(() => toolsOfModule({ a: echo, b: defineTool({ ...echo }) }, 'mod.ts')).toThrow(/defines the tool echo twice \(exports a and b\)/);
  });

  it('parses the flags and refuses bad ones', () => {
    expect(parseWorker(['m.ts', '--nats', 'nats://h:1', '--name', 'mine', '--concurrency', '4'])).toEqual({ module: 'm.ts', nats: 'nats://h:1', name: 'mine', concurrency: 4 });
    expect(() => parseWorker([])).toThrow(/needs a module/);
    expect(() => parseWorker(['a.ts', 'b.ts'])).toThrow(/one module/);
    expect(() => parseWorker(['m.ts', '--concurrency', '1.5'])).toThrow(/--concurrency must be a positive whole number/);
    expect(() => parseWorker(['m.ts', '--name', 'a.b'])).toThrow(/--name must match/);
    expect(serviceNameOf('examples/text-tools.ts')).toBe('text-tools');
  });
});

describe('agentbus worker', () => {
  const nats = useNatsServer();

  it('serves the example module on the bus, announced on $SRV, and leaves $SRV on SIGTERM', async () => {
    const child: ChildProcessWithoutNullStreams = spawn(process.execPath, [AGENTBUS_BIN, 'worker', 'examples/text-tools.ts', '--nats', nats.server.url, '--concurrency', '2'], { cwd: ROOT, env: cleanEnv() });
    let stdout = '';
    let stderr = '';
    child.stderr.on('data', (chunk: Buffer) => (stderr += chunk.toString()));
    const exited = new Promise<number | null>((resolve) => child.once('exit', (code) => resolve(code)));
    try {
      await new Promise<void>((resolve, reject) => {
        const timer = setTimeout(() => reject(new Error(`no "serving" line within 15 s; stderr:\n${stderr}`)), 15_000);
        child.stdout.on('data', (chunk: Buffer) => {
          stdout += chunk.toString();
          if (stdout.includes('\n')) {
            clearTimeout(timer);
            resolve();
          }
        });
        void exited.then((code) => reject(new Error(`worker exited with ${code} before serving; stderr:\n${stderr}`)));
      });
      expect(stdout).toBe(`serving 2 tool(s) as text-tools on ${nats.server.url}: shout, word_count (Ctrl-C to stop)\n`);

      const client = createToolClient({ nc: nats.nc, subjects: createSubjects(PREFIX), codec: createCodec(), logger: pino({ level: 'silent' }) });
      const listed = await client.listTools({});
      expect(listed.map((tool) => `${tool.name}:${tool.tier}`).sort()).toEqual(['shout:read_only', 'word_count:read_only']);
      expect(await client.call(toolCallRequest('shout', { text: 'hello bus' }), {})).toMatchObject({ ok: true, output: 'HELLO BUS' });
      expect(await client.call(toolCallRequest('word_count', { text: 'two words\nand more' }), {})).toMatchObject({ ok: true, output: { words: 4, lines: 2 } });
      expect(await client.call(toolCallRequest('shout', { text: 7 }), {})).toMatchObject({ ok: false, error: { code: 'invalid_arguments' } });

      child.kill('SIGTERM');
      expect(await exited).toBe(0);
      client.invalidate();
      expect(await client.listTools({})).toEqual([]);
      expect(await client.call(toolCallRequest('shout', { text: 'anyone?' }), {})).toMatchObject({ ok: false, error: { code: 'unknown_tool' } });
    } finally {
      if (child.exitCode === null && child.signalCode === null) child.kill('SIGKILL');
    }
  });

  it('exits 2 with a clear message for a missing module, a module without tools, duplicate names and bad flags', async () => {
    const cases: Array<[string[], RegExp]> = [
      [['worker', 'examples/nope.ts', '--nats', nats.server.url], /no module "examples\/nope\.ts"/],
      [['worker', 'test/fixtures/worker-no-tools.ts', '--nats', nats.server.url], /exports no tools/],
      [['worker', 'test/fixtures/worker-duplicate-tools.ts', '--nats', nats.server.url], /defines the tool echo twice \(exports first and second\)/],
      [['worker', 'examples/text-tools.ts', '--concurrency', '0', '--nats', nats.server.url], /--concurrency must be a positive whole number/],
      [['worker', 'examples/text-tools.ts', '--bogus'], /Unknown option '--bogus'/],
      [['worker'], /worker needs a module/],
    ];
    const runs = await Promise.all(cases.map(([args]) => agentbus(args)));
    runs.forEach((run, index) => {
      expect({ args: cases[index]![0], code: run.code }).toEqual({ args: cases[index]![0], code: 2 });
      expect(run.stderr).toMatch(cases[index]![1]);
      expect(run.stdout).toBe('');
    });
  }, 120_000);

  it('exits 2 when there is no bus to serve on, and 1 when the module throws while loading', async () => {
    const empty = await mkdtemp(join(tmpdir(), 'agentbus-worker-'));
    try {
      const noBus = await agentbus(['worker', join(ROOT, 'examples', 'text-tools.ts')], empty);
      expect(noBus.code).toBe(2);
      expect(noBus.stderr).toMatch(/no bus to serve on/);
    } finally {
      await rm(empty, { recursive: true, force: true });
    }
    const broken = await agentbus(['worker', 'test/fixtures/worker-broken.ts', '--nats', nats.server.url]);
    expect(broken.code).toBe(1);
    expect(broken.stderr).toMatch(/could not load test\/fixtures\/worker-broken\.ts: this module is broken on purpose/);
  }, 120_000);
});
