import { spawn } from 'node:child_process';
import type { ChildProcessWithoutNullStreams } from 'node:child_process';
import { mkdtemp, readFile, rm, writeFile } from 'node:fs/promises';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import type { NatsConnection, Subscription } from '@nats-io/nats-core';
import { connect } from '@nats-io/transport-node';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { parseAsk } from '../../cli/ask.ts';
import { MAX_FILE_BYTES } from '../../cli/ask-input.ts';
import { jetstreamManager } from '@nats-io/jetstream';
import { createCodec } from '../../src/protocol/index.ts';
import type { AgentEvent, GenerateRequest } from '../../src/protocol/index.ts';
import { AGENTBUS_BIN, runAgentbus } from '../helpers/agentbus-bin.ts';
import type { AgentbusRun } from '../helpers/agentbus-bin.ts';

// `ask -`, `--file`, `--dry-run`, `--quiet`, `--force-tool` and `--force-finish` against one `agentbus up` stack: the
// real binary, services and nats-server. The scripted provider plays an empty script, so every call echoes the last
// user message; an outside subscriber on the provider's subject sees every request the runtime sends it.

let workdir: string;
let up: ChildProcessWithoutNullStreams | undefined;
let upOutput = '';
let outsider: NatsConnection;
let generates: Subscription;
const requests: GenerateRequest[] = [];
const codec = createCodec();

function offlineEnv(): NodeJS.ProcessEnv {
  const env = { ...process.env };
  for (const name of ['NATS_URL', 'OPENAI_API_KEY', 'ANTHROPIC_API_KEY', 'OLLAMA_HOST', 'AGENTBUS_MODEL', 'AGENTBUS_CONFIG']) delete env[name];
  env.AGENTBUS_DASHBOARD_PORT = '0';
  env.AGENTBUS_SCRIPT = join(workdir, 'script.json');
  return env;
}

/** Runs `agentbus args` in the stack's folder, writing `stdin` (then closing it) when given. */
function agentbus(args: string[], stdin?: string): Promise<AgentbusRun> {
  return runAgentbus(args, { cwd: workdir, env: offlineEnv(), ...(stdin === undefined ? {} : { stdin }) });
}

/** The provider requests of one session. */
const requestsOf = (sessionId: string) => requests.filter((request) => request.sessionId === sessionId);

/** Starts `agentbus up` with the services ask needs, and resolves once it says it is up. */
async function startUp(): Promise<void> {
  upOutput = '';
  const child = spawn(process.execPath, [AGENTBUS_BIN, 'up', '--services', 'runtime,provider,tools'], { cwd: workdir, env: offlineEnv() });
  up = child;
  child.stderr.on('data', (chunk: Buffer) => (upOutput += chunk.toString()));
  await new Promise<void>((resolve, reject) => {
    const timer = setTimeout(() => reject(new Error(`agentbus up did not come up\n${upOutput}`)), 100_000);
    const check = () => {
      if (!upOutput.includes('agentbus is up')) return;
      clearTimeout(timer);
      child.stderr.off('data', check);
      resolve();
    };
    child.stderr.on('data', check);
    child.once('exit', (code) => {
      clearTimeout(timer);
      reject(new Error(`agentbus up exited (${code})\n${upOutput}`));
    });
  });
}

beforeAll(async () => {
  workdir = await mkdtemp(join(tmpdir(), 'agentbus-cli-input-'));
  await writeFile(join(workdir, 'README.md'), '# A project about otters\n');
  await writeFile(join(workdir, 'script.json'), JSON.stringify({ responses: [] }));
  // A loaded machine may start the services slower than up's own 30 s readiness wait: up is started again then.
  for (let attempt = 1; ; attempt++) {
    try {
      await startUp();
      break;
    } catch (error) {
      if (attempt === 3 || !upOutput.includes('services not ready')) throw error;
    }
  }
  const { url, token } = JSON.parse(await readFile(join(workdir, '.agentbus', 'stack.json'), 'utf8')) as { url: string; token: string };
  outsider = await connect({ servers: url, token });
  generates = outsider.subscribe('agentbus.provider.*.generate', {
    callback: (error, message) => {
      if (!error) requests.push(codec.decode(message.data) as GenerateRequest);
    },
  });
  await outsider.flush();
}, 330_000);

afterAll(async () => {
  generates?.unsubscribe();
  await outsider?.close().catch(() => undefined);
  if (up && up.exitCode === null) {
    const exited = new Promise((resolve) => up!.once('exit', resolve));
    up.kill('SIGINT');
    await exited;
  }
  await rm(workdir, { recursive: true, force: true });
}, 30_000);

describe('ask input flags', () => {
  it('parses the input flags and refuses bad combinations with a clear message', () => {
    expect(parseAsk(['-'])).toMatchObject({ stdin: true, files: [] });
    expect(parseAsk(['--file', 'a.txt', '--file', 'b.txt', '--quiet', 'hi'])).toMatchObject({ files: ['a.txt', 'b.txt'], quiet: true, prompt: { text: 'hi' } });
    expect(parseAsk(['--dry-run', 'x']).prompt).toMatchObject({ dryRun: true });
    expect(parseAsk(['--force-tool', 'read_file', '--force-args', '{"path":"a"}', 'x']).prompt).toMatchObject({ forceTool: { name: 'read_file', args: { path: 'a' } } });
    expect(parseAsk(['--force-tool', 'current_time', 'x']).prompt).toMatchObject({ forceTool: { name: 'current_time', args: {} } });
    expect(parseAsk(['--force-finish', 'x']).prompt).toMatchObject({ forceFinish: true });
    expect(() => parseAsk(['--force-args', '{}', 'x'])).toThrow(/--force-args goes with --force-tool/);
    expect(() => parseAsk(['--force-tool', 'a', '--force-finish', 'x'])).toThrow(/exclude each other/);
    expect(() => parseAsk(['--force-tool', 'a', '--force-args', '{nope', 'x'])).toThrow(/--force-args must be a JSON object/);
    expect(() => parseAsk(['--force-tool', 'a', '--force-args', '[1]', 'x'])).toThrow(/--force-args must be a JSON object/);
  });
});

describe('ask against a running stack', { timeout: 120_000 }, () => {
  it('reads the prompt from stdin with -', async () => {
    const run = await agentbus(['ask', '--session', 'in-stdin', '-'], 'a prompt\nfrom a pipe\n');
    expect(run.code).toBe(0);
    expect(run.stdout.trim()).toBe('a prompt\nfrom a pipe');
    const [request] = requestsOf('in-stdin');
    expect(request?.messages.at(-1)).toEqual({ role: 'user', content: 'a prompt\nfrom a pipe' });
    const empty = await agentbus(['ask', '--session', 'in-stdin-empty', '-'], '  \n');
    expect(empty.code).toBe(2);
    expect(empty.stderr).toContain('the prompt on stdin is empty');
  });

  it('attaches --file contents with their names; refuses a file over the limit, and binary files', async () => {
    await writeFile(join(workdir, 'notes.txt'), 'otters hold hands\n');
    await writeFile(join(workdir, 'more.md'), 'they sleep on water');
    const run = await agentbus(['ask', '--session', 'in-files', '--file', 'notes.txt', '--file', 'more.md', 'read these']);
    expect(run.code).toBe(0);
    const content = requestsOf('in-files')[0]?.messages.at(-1)?.content;
    expect(content).toBe('read these\n\n<file name="notes.txt">\notters hold hands\n</file>\n\n<file name="more.md">\nthey sleep on water\n</file>');

    await writeFile(join(workdir, 'big.txt'), 'x'.repeat(MAX_FILE_BYTES + 1));
    const big = await agentbus(['ask', '--session', 'in-big', '--file', 'big.txt', 'read it']);
    expect(big.code).toBe(2);
    expect(big.stderr).toContain('--file big.txt is 257 KiB, over the limit of 256 KiB per file');
    await writeFile(join(workdir, 'image.bin'), Buffer.from([0x89, 0x50, 0x4e, 0x47, 0x00, 0x01]));
    const binary = await agentbus(['ask', '--session', 'in-binary', '--file', 'image.bin', 'read it']);
    expect(binary.code).toBe(2);
    expect(binary.stderr).toContain('--file image.bin looks binary');
    await writeFile(join(workdir, 'latin1.txt'), Buffer.from([0x63, 0x61, 0x66, 0xe9]));
    const latin1 = await agentbus(['ask', '--session', 'in-latin1', '--file', 'latin1.txt', 'read it']);
    expect(latin1.code).toBe(2);
    expect(latin1.stderr).toContain('--file latin1.txt is not valid UTF-8 text');
    const missing = await agentbus(['ask', '--session', 'in-missing', '--file', 'nope.txt', 'read it']);
    expect(missing.code).toBe(2);
    expect(missing.stderr).toContain('--file nope.txt: no such file');
    expect(requestsOf('in-big').length + requestsOf('in-binary').length + requestsOf('in-latin1').length + requestsOf('in-missing').length).toBe(0);
  });

  it('--dry-run prints what the first step would send, with history and tool schemas, and calls no model nor logs anything', async () => {
    const first = await agentbus(['ask', '--session', 'in-dry', 'otters are mustelids']);
    expect(first.code).toBe(0);
    const before = requestsOf('in-dry').length;
    expect(before).toBe(1);
    // The newest log message of a session: unchanged by a dry run.
    const jsm = await jetstreamManager(outsider);
    const lastLogged = async (sessionId: string) => {
      try {
        return (await jsm.streams.getMessage('AGENTBUS_LOG', { last_by_subj: `agentbus.default.sessions.${sessionId}.log` }))?.seq ?? 0;
      } catch {
        return 0;
      }
    };
    const loggedBefore = await lastLogged('in-dry');
    expect(loggedBefore).toBeGreaterThan(0);

    const dry = await agentbus(['ask', '--session', 'in-dry', '--max-steps', '3', '--dry-run', 'what are otters?']);
    expect(dry.code).toBe(0);
    expect(dry.stdout).toContain('model: scripted:default');
    expect(dry.stdout).toContain('budgets: maxSteps 3, maxCost none');
    // The system prompt, the history, the prompt (memory's recall would follow the system prompt; it is not started here).
    expect(dry.stdout).toMatch(/messages \(4\):\n--- system ---\nYou are .+\n--- user ---\notters are mustelids\n--- assistant ---\notters are mustelids\n--- user ---\nwhat are otters\?\n$/);
    expect(dry.stdout).toMatch(/ {2}read_file: .*\n {4}parameters: \{"type":"object".*"path"/);
    const json = await agentbus(['ask', '--session', 'in-dry', '--json', '--force-finish', '--dry-run', 'and seals?']);
    expect(json.code).toBe(0);
    const event = JSON.parse(json.stdout) as Extract<AgentEvent, { type: 'request.prepared' }>;
    expect(event).toMatchObject({ type: 'request.prepared', sessionId: 'in-dry', step: 1, data: { model: 'scripted:default', tools: [], maxSteps: 8 } });
    expect(event.data.messages.at(-1)).toEqual({ role: 'user', content: 'and seals?' });

    // A new session stays without a log, the other's log has nothing new, and no provider request was made.
    const fresh = await agentbus(['ask', '--session', 'in-dry-new', '--dry-run', 'hello']);
    expect(fresh.code).toBe(0);
    expect(fresh.stdout).toContain('--- user ---\nhello\n');
    await outsider.flush();
    await new Promise((resolve) => setTimeout(resolve, 500));
    expect(requestsOf('in-dry')).toHaveLength(before);
    expect(requestsOf('in-dry-new')).toHaveLength(0);
    expect(await lastLogged('in-dry')).toBe(loggedBefore);
    expect(await lastLogged('in-dry-new')).toBe(0);
  });

  it('--quiet prints only the answer: nothing on stderr', async () => {
    const loud = await agentbus(['ask', '--session', 'in-loud', 'say otter']);
    expect(loud.code).toBe(0);
    expect(loud.stderr).toContain('Calling scripted:default');
    const quiet = await agentbus(['ask', '--session', 'in-quiet', '--quiet', 'say otter']);
    expect(quiet.code).toBe(0);
    expect(quiet.stdout).toBe('say otter\n');
    expect(quiet.stderr).toBe('');
  });

  it('--force-tool makes the first step call the tool without the model, logged as a forced assistant message', async () => {
    const run = await agentbus(['ask', '--session', 'in-force', '--json', '--force-tool', 'read_file', '--force-args', '{"path":"README.md"}', 'what is this?']);
    expect(run.code).toBe(0);
    const events = run.stdout.trim().split('\n').map((line) => JSON.parse(line) as AgentEvent);
    const forced = events.find((event) => event.type === 'assistant.message' && event.step === 1);
    expect(forced).toMatchObject({ data: { forced: true, text: '', cost: 0, toolCalls: [{ name: 'read_file', args: { path: 'README.md' } }] } });
    expect(events.find((event) => event.type === 'tool.result')).toMatchObject({ step: 1, data: { name: 'read_file', isError: false } });
    expect(events.at(-1)).toMatchObject({ type: 'turn.ended', data: { reason: 'yielded', steps: 2 } });
    // One model call, at step 2, with the tool's result in its messages.
    const sent = requestsOf('in-force');
    expect(sent).toHaveLength(1);
    expect(sent[0]?.messages.find((message) => message.role === 'tool')?.content).toContain('A project about otters');

    const unknown = await agentbus(['ask', '--session', 'in-force-bad', '--force-tool', 'read_fil', 'x']);
    expect(unknown.code).toBe(2);
    expect(unknown.stderr).toMatch(/prompt refused: unknown_tool: forceTool: no live worker serves a tool named "read_fil"; tools: .*read_file/);
    const badArgs = await agentbus(['ask', '--session', 'in-force-bad', '--force-tool', 'read_file', '--force-args', '{"path":7}', 'x']);
    expect(badArgs.code).toBe(2);
    expect(badArgs.stderr).toContain('prompt refused: invalid_arguments: forceTool: arguments do not match the schema of read_file: path:');
    expect(requestsOf('in-force-bad')).toHaveLength(0);
  });

  it('--force-finish offers the first step no tools', async () => {
    const run = await agentbus(['ask', '--session', 'in-finish', '--force-finish', 'just answer']);
    expect(run.code).toBe(0);
    expect(run.stdout.trim()).toBe('just answer');
    const sent = requestsOf('in-finish');
    expect(sent).toHaveLength(1);
    expect(sent[0]?.tools).toEqual([]);
    // Without it, the same stack offers its tools.
    expect(requestsOf('in-quiet')[0]?.tools.length).toBeGreaterThan(0);
  });
});
