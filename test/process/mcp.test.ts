import { mkdtemp, readFile, rm } from 'node:fs/promises';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { pino } from 'pino';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { createToolClient } from '../../src/bus/tool-client.ts';
import { UsageError } from '../../cli/context.ts';
import { mcpServiceName, parseMcp } from '../../cli/mcp-options.ts';
import type { ToolClient } from '../../src/bus/tool-client.ts';
import { CancelledError } from '../../src/errors.ts';
import { createMcpCall, mcpServerEnvironment, mcpToolDefinitions, openMcpSession } from '../../src/mcp/index.ts';
import { createCodec, createSubjects } from '../../src/protocol/index.ts';
import type { ToolCallReply } from '../../src/protocol/index.ts';
import { executeToolCall } from '../../src/tool-sdk/index.ts';
import type { ToolProgress } from '../../src/tool-sdk/index.ts';
import { runAgentbus } from '../helpers/agentbus-bin.ts';
import { startMcpHttpServer } from '../helpers/mcp-http-server.ts';
import type { McpHttpServer } from '../helpers/mcp-http-server.ts';
import { MCP_STDIO_SERVER, startAgentbus } from '../helpers/mcp-process.ts';
import type { AgentbusProcess } from '../helpers/mcp-process.ts';
import type { McpTestRecord } from '../helpers/mcp-test-tools.ts';
import { ROOT } from '../helpers/service-process.ts';
import { collectEvents, requestJson, startStack } from '../helpers/stack.ts';
import type { TestStack } from '../helpers/stack.ts';
import { toolCallRequest } from '../helpers/run-tool.ts';

const silent = pino({ level: 'silent' });
/** The variables the test server reads, passed to it by name (a stdio server gets PATH, HOME and LANG besides). */
const SERVER_ENV = ['--env', 'MCP_TEST_RECORD', '--env', 'MCP_TEST_STDERR'];
const MCP_TOOLS = ['add', 'echo', 'fail', 'grow', 'note', 'remove', 'slow'];

let stack: TestStack;
let directory: string;
let recordFile: string;
let mcp: AgentbusProcess;
let tools: ToolClient;

/** This process's environment without anything that would pick a bus, and with the test server's record file. */
function mcpEnv(extra: Record<string, string> = {}): NodeJS.ProcessEnv {
  const env: NodeJS.ProcessEnv = { ...process.env, MCP_TEST_RECORD: recordFile, ...extra };
  for (const name of ['NATS_URL', 'NATS_USER', 'NATS_PASSWORD', 'NATS_TOKEN', 'AGENTBUS_INBOX_PREFIX', 'AGENTBUS_PREFIX', 'LOG_LEVEL']) delete env[name];
  return { ...env, ...extra };
}

async function records(file = recordFile): Promise<McpTestRecord[]> {
  const text = await readFile(file, 'utf8').catch(() => '');
  return text
    .split('\n')
    .filter(Boolean)
    .map((line) => JSON.parse(line) as McpTestRecord);
}

async function recordWhere(test: (record: McpTestRecord) => boolean, file = recordFile, timeoutMs = 10_000): Promise<McpTestRecord> {
  const until = Date.now() + timeoutMs;
  for (;;) {
    const found = (await records(file)).find(test);
    if (found) return found;
    if (Date.now() > until) throw new Error(`no such record within ${timeoutMs} ms; saw ${JSON.stringify(await records(file))}`);
    await new Promise((resolve) => setTimeout(resolve, 50));
  }
}

/** The process id of the newest stdio test server. */
async function newestServerPid(): Promise<number> {
  const started = (await records()).filter((record) => record.event === 'started');
  return (started.at(-1) as { pid: number }).pid;
}

function call(name: string, args: unknown, client = tools): Promise<ToolCallReply> {
  return client.call(toolCallRequest(name, args, 20_000), {});
}

function alive(pid: number): boolean {
  try {
    process.kill(pid, 0);
    return true;
  } catch {
    return false;
  }
}

beforeAll(async () => {
  directory = await mkdtemp(join(tmpdir(), 'agentbus-mcp-'));
  recordFile = join(directory, 'records.jsonl');
  stack = await startStack({
    script: {
      responses: [
        { text: 'Adding.', toolCalls: [{ name: 'add', args: { a: 2, b: 3 } }] },
        { text: 'It is 5.' },
        { text: 'Counting.', toolCalls: [{ name: 'slow', args: { steps: 200, delayMs: 100 } }] },
        { text: 'never reached' },
      ],
    },
  });
  tools = createToolClient({ nc: stack.client, subjects: createSubjects('agentbus'), codec: createCodec(), logger: silent, discoveryTtlMs: 0 });
  mcp = startAgentbus(['mcp', '--nats', stack.server.url, '--timeout', 'slow=30000', '--timeout', 'nosuch=5', ...SERVER_ENV, '--', ...MCP_STDIO_SERVER], mcpEnv());
  await mcp.waitFor('(Ctrl-C to stop)');
});

afterAll(async () => {
  await mcp?.stop();
  await stack?.stop();
  await rm(directory, { recursive: true, force: true });
});

describe('agentbus mcp flags', () => {
  it('takes the command after --, or --url with headers, and tiers and timeouts for all tools or one', () => {
    const stdio = parseMcp(['--tier', 'side_effecting', '--tier', 'search=read_only', '--timeout', '5000', '--timeout', 'slow=90000', '--', 'npx', '-y', 'server', '--flag']);
    expect(stdio.server).toEqual({ kind: 'stdio', command: 'npx', args: ['-y', 'server', '--flag'] });
    expect(stdio.tiers).toEqual({ all: 'side_effecting', byTool: new Map([['search', 'read_only']]) });
    expect(stdio.timeouts).toEqual({ all: 5000, byTool: new Map([['slow', 90000]]) });
    const http = parseMcp(['--url', 'https://mcp.example/mcp', '--header', 'Authorization: Bearer x', '--name', 'remote']);
    expect(http.server).toEqual({ kind: 'http', url: new URL('https://mcp.example/mcp'), headers: { Authorization: 'Bearer x' } });
    expect(http.name).toBe('remote');
    expect(http.prefix).toBeUndefined();
    expect(parseMcp(['--prefix', 'fs_', '--', 'node']).prefix).toBe('fs_');
  });

  it('refuses what cannot work, with a reason', () => {
    const cases: Array<[string[], RegExp]> = [
      [[], /mcp needs an MCP server/],
      [['server.js'], /put the MCP server's command after --/],
      [['--'], /no command after --/],
      [['--url', 'http://h/mcp', '--', 'node'], /not both/],
      [['--url', 'ftp://h/mcp'], /--url must be an http\(s\) URL/],
      [['--url', 'http://h/mcp', '--header', 'nocolon'], /--header must be "Name: value"/],
      [['--header', 'A: b', '--', 'node'], /--header goes with --url/],
      [['--tier', 'admin', '--', 'node'], /--tier must be one of read_only, side_effecting, privileged/],
      [['--tier', '=read_only', '--', 'node'], /name the tool before =/],
      [['--timeout', '0', '--', 'node'], /--timeout must be a positive whole number/],
      [['--timeout', 'slow=1.5', '--', 'node'], /--timeout must be a positive whole number/],
      [['--timeout', '2147478648', '--', 'node'], /--timeout must be at most 2147478647 ms/],
      [['--timeout', 'slow=99999999999', '--', 'node'], /--timeout must be at most 2147478647 ms/],
      [['--name', 'a.b', '--', 'node'], /--name must match/],
      [['--concurrency', '0', '--', 'node'], /--concurrency must be a positive whole number/],
      [['--prefix', 'fs.', '--', 'node'], /--prefix must match \[A-Za-z0-9_-\]\{1,63\}/],
      [['--prefix', '', '--', 'node'], /--prefix must match/],
    ];
    for (const [argv, message] of cases) expect(() => parseMcp(argv), argv.join(' ')).toThrow(message);
    expect(() => parseMcp(['--url', 'http://h/mcp', '--header', 'Authorization Bearer sk-no-colon-123'])).toThrow(/^(?!.*sk-no-colon-123)/);
    expect(() => parseMcp([])).toThrow(UsageError);
    expect(parseMcp(['--timeout', '2147478647', '--', 'node']).timeouts.all).toBe(2_147_478_647);
  });

  it('names the service after the server unless told', () => {
    expect(mcpServiceName('@acme/files server')).toBe('-acme-files-server');
    expect(mcpServiceName(undefined)).toBe('mcp');
    expect(mcpServiceName('...')).toBe('mcp');
  });
});

describe('agentbus mcp over stdio', () => {
  it('serves each MCP tool under its own name, with its schema and the tier its annotations give', async () => {
    expect(mcp.stdout()).toMatch(/^serving 7 tool\(s\) of node --import tsx test\/helpers\/mcp-stdio-server\.ts as agentbus-test-mcp on nats:\/\/127\.0\.0\.1:\d+: add \(read_only\), echo \(read_only\), slow \(read_only\), remove \(privileged\), note \(side_effecting\), fail \(read_only\), grow \(privileged\) \(Ctrl-C to stop\)\n$/);
    expect(mcp.stderr()).toContain('not serving the MCP tool "bad.name": its name is not a bus subject token');
    expect(mcp.stderr()).toContain('--timeout names "nosuch", which the MCP server does not offer');
    const listed = (await tools.listTools({})).filter((tool) => MCP_TOOLS.includes(tool.name));
    expect(listed.map((tool) => `${tool.name}:${tool.tier}:${tool.idempotent}:${tool.timeoutMs}`)).toEqual([
      'add:read_only:true:60000',
      'echo:read_only:true:60000',
      'fail:read_only:true:60000',
      'grow:privileged:false:60000',
      'note:side_effecting:true:60000',
      'remove:privileged:false:60000',
      'slow:read_only:true:30000',
    ]);
    const add = listed.find((tool) => tool.name === 'add')!;
    expect(add.description).toBe('Adds two numbers');
    expect(add.parameters).toMatchObject({ type: 'object', properties: { a: { type: 'number' }, b: { type: 'number' } }, required: ['a', 'b'] });
    expect(add.parameters).not.toHaveProperty('$schema');
  });

  it('is called by a turn: arguments in, result out', async () => {
    const watcher = collectEvents(stack.client, 'default', 'mcp-1');
    expect(await requestJson(stack.client, 'agentbus.default.sessions.mcp-1.prompt', { text: 'What is 2 + 3?' })).toMatchObject({ accepted: true });
    const events = await watcher.until((seen) => seen.some((event) => event.type === 'turn.ended'));
    watcher.stop();
    const result = events.find((event) => event.type === 'tool.result');
    expect(result?.type === 'tool.result' && result.data).toMatchObject({ name: 'add', isError: false, output: '5' });
    expect(events.find((event) => event.type === 'turn.ended')).toMatchObject({ data: { reason: 'yielded', text: 'It is 5.' } });
    expect(await recordWhere((record) => record.event === 'call' && record.tool === 'add')).toMatchObject({ args: { a: 2, b: 3 } });
  });

  it('shows a turn the server\'s progress as tool.progress, and passes the turn\'s cancel on to it as a cancellation', async () => {
    const watcher = collectEvents(stack.client, 'default', 'mcp-1');
    expect(await requestJson(stack.client, 'agentbus.default.sessions.mcp-1.prompt', { text: 'Count for a long time' })).toMatchObject({ accepted: true });
    await recordWhere((record) => record.event === 'call' && record.tool === 'slow');
    const seen = await watcher.until((events) => events.some((event) => event.type === 'tool.progress'));
    expect(seen.find((event) => event.type === 'tool.progress')).toMatchObject({ data: { name: 'slow', message: 'step 1 of 200', progress: 1, total: 200 } });
    expect(await requestJson(stack.client, 'agentbus.default.sessions.mcp-1.cancel', {})).toMatchObject({ ok: true });
    const events = await watcher.until((seen) => seen.some((event) => event.type === 'turn.ended'));
    watcher.stop();
    expect(events.find((event) => event.type === 'turn.ended')).toMatchObject({ data: { reason: 'cancelled' } });
    expect(await recordWhere((record) => record.event === 'cancelled')).toMatchObject({ tool: 'slow' });
  });

  it('answers with structured content, text of other parts, failures and bad arguments as tool errors', async () => {
    const pid = await newestServerPid();
    expect(await call('echo', { text: 'hi' })).toMatchObject({ ok: true, output: { text: 'hi', pid } });
    expect(await call('note', { text: 'x' })).toMatchObject({ ok: true, output: 'saved\n[image: image/png, 5 bytes, not shown]' });
    expect(await call('fail', {})).toMatchObject({ ok: false, error: { code: 'tool_failed', message: 'it failed on purpose', retryable: false } });
    const bad = await call('add', { a: 'two', b: 3 });
    expect(bad).toMatchObject({ ok: false, error: { code: 'invalid_arguments' } });
    expect(!bad.ok && bad.error.message).toMatch(/a must be number/);
    expect((await records()).filter((record) => record.event === 'call' && record.tool === 'add')).toHaveLength(1);
  });

  it('hands the server\'s progress to the tool\'s context, and a cancel reaches its handler', async () => {
    const file = join(directory, 'in-process.jsonl');
    const [command, ...args] = MCP_STDIO_SERVER;
    const session = await openMcpSession(
      { kind: 'stdio', command: command!, args, env: { ...mcpServerEnvironment(process.env), MCP_TEST_RECORD: file }, cwd: ROOT },
      { client: { name: 'agentbus-test', version: '0.0.0' }, stderr: 'ignore' },
    );
    try {
      const mcpCall = createMcpCall({ label: 'test', session: () => session, downReason: () => 'down', onBroken: () => undefined });
      const { tools: definitions } = mcpToolDefinitions(await session.listTools({}), { call: mcpCall, tierOf: () => undefined, timeoutOf: () => 10_000 });
      const slow = definitions.find((tool) => tool.name === 'slow')!;
      const run = (steps: number, signal: AbortSignal, onProgress: (update: ToolProgress) => void) =>
        executeToolCall({ tool: slow, request: toolCallRequest('slow', { steps, delayMs: 30 }), logger: () => silent, signal, now: Date.now, onProgress });

      const updates: ToolProgress[] = [];
      expect(await run(3, new AbortController().signal, (update) => updates.push(update))).toMatchObject({ ok: true, output: 'counted to 3' });
      // The last notification may come in one read with the result, and the SDK drops progress of a finished request.
      expect(updates.slice(0, 2)).toEqual([1, 2].map((step) => ({ message: `step ${step} of 3`, progress: step, total: 3 })));

      const controller = new AbortController();
      const cancelled = await run(100, controller.signal, (update) => {
        if (update.progress === 2) controller.abort(new CancelledError('the caller cancelled'));
      });
      expect(cancelled).toMatchObject({ ok: false, error: { code: 'cancelled' } });
      expect(await recordWhere((record) => record.event === 'cancelled', file)).toMatchObject({ tool: 'slow' });
    } finally {
      await session.close();
    }
  });

  it('serves again when the server says its tool list changed', async () => {
    expect(await call('grow', {})).toMatchObject({ ok: true, output: 'grown' });
    await mcp.waitFor("the MCP server's tools changed; serving 8 tool(s)");
    expect((await tools.listTools({})).find((tool) => tool.name === 'late')).toMatchObject({ tier: 'read_only' });
    expect(await call('late', {})).toMatchObject({ ok: true, output: 'late but here' });
  });

  it('fails a running call retryably when the server dies, restarts it, reads its tools again and serves again', async () => {
    const pid = await newestServerPid();
    const running = call('slow', { steps: 200, delayMs: 100 });
    await recordWhere((record) => record.event === 'call' && record.tool === 'slow' && record.pid === pid);
    process.kill(pid, 'SIGKILL');
    expect(await running).toMatchObject({ ok: false, error: { code: 'unavailable', retryable: true } });
    await mcp.waitFor('the MCP server is back');
    expect(mcp.stderr()).toMatch(/the MCP server is down \(.*\); restarting it in 250 ms \(attempt 1\)/);
    const restarted = await newestServerPid();
    expect(restarted).not.toBe(pid);
    expect(await call('echo', { text: 'again' })).toMatchObject({ ok: true, output: { text: 'again', pid: restarted } });
    // The new process never grew `late`: its list is served anew without it.
    await expect.poll(async () => (await tools.listTools({})).some((tool) => tool.name === 'late'), { timeout: 5_000 }).toBe(false);
  });

  it('passes the server\'s stderr on line by line, after its name and scrubbed of secrets', async () => {
    const secret = 'mcp-test-secret-4f9a1c';
    const logging = startAgentbus(['mcp', '--nats', stack.server.url, '--name', 'stderr-mcp', '--prefix', 'e_', ...SERVER_ENV, '--', ...MCP_STDIO_SERVER], mcpEnv({ MCP_TEST_API_KEY: secret, MCP_TEST_STDERR: `starting with key ${secret}` }));
    try {
      await logging.waitFor('(Ctrl-C to stop)');
      await logging.waitFor('[stderr-mcp] starting with key [REDACTED:configured-secret]');
      expect(logging.stderr()).not.toContain(secret);
    } finally {
      expect(await logging.stop()).toBe(0);
    }
  });

  it('shares each tool\'s queue group with a second agentbus mcp of the same server', async () => {
    const second = startAgentbus(['mcp', '--nats', stack.server.url, ...SERVER_ENV, '--', ...MCP_STDIO_SERVER], mcpEnv());
    try {
      await second.waitFor('(Ctrl-C to stop)');
      const pids = new Set<number>();
      for (let attempt = 0; attempt < 40 && pids.size < 2; attempt += 1) {
        const reply = await call('echo', { text: `n${attempt}` });
        if (reply.ok) pids.add((reply.output as { pid: number }).pid);
      }
      expect(pids.size).toBe(2);
      expect(second.stderr()).not.toContain('is also served');
    } finally {
      expect(await second.stop()).toBe(0);
    }
  });

  it('warns of a tool that a service of another name serves too, and serves under --prefix apart from it', async () => {
    const args = ['mcp', '--nats', stack.server.url, '--name', 'other-mcp'];
    const other = startAgentbus([...args, ...SERVER_ENV, '--', ...MCP_STDIO_SERVER], mcpEnv());
    const prefixed = startAgentbus([...args, '--prefix', 'x_', '--tier', 'x_echo=privileged', ...SERVER_ENV, '--', ...MCP_STDIO_SERVER], mcpEnv());
    try {
      await Promise.all([other.waitFor('(Ctrl-C to stop)'), prefixed.waitFor('(Ctrl-C to stop)')]);
      expect(other.stderr()).toContain('agentbus: the tool "add" is also served on the bus by the service "agentbus-test-mcp": calls of it go to either one; serve these tools under other names with --prefix');
      expect(prefixed.stderr()).not.toContain('is also served');
      expect(prefixed.stderr()).not.toContain('does not offer');
      expect(prefixed.stdout()).toMatch(/x_add \(read_only\), x_echo \(privileged\)/);
      expect(await call('x_add', { a: 1, b: 2 })).toMatchObject({ ok: true, output: '3' });
    } finally {
      expect(await other.stop()).toBe(0);
      expect(await prefixed.stop()).toBe(0);
    }
  });
});

describe('agentbus mcp over streamable HTTP', () => {
  let http: McpHttpServer;
  let bridge: AgentbusProcess;
  let httpTools: ToolClient;

  beforeAll(async () => {
    http = await startMcpHttpServer();
    httpTools = createToolClient({ nc: stack.client, subjects: createSubjects('mcphttp'), codec: createCodec(), logger: silent, discoveryTtlMs: 0 });
    bridge = startAgentbus(['mcp', '--nats', stack.server.url, '--url', http.url, '--name', 'http-mcp', '--tier', 'side_effecting', '--tier', 'add=read_only'], mcpEnv({ AGENTBUS_PREFIX: 'mcphttp' }));
    await bridge.waitFor('(Ctrl-C to stop)');
  });

  afterAll(async () => {
    await bridge?.stop();
    await http?.close();
  });

  it('serves the tools of a URL, with --tier overriding the annotations', async () => {
    expect(bridge.stdout()).toContain(`as http-mcp on ${stack.server.url}`);
    const listed = await httpTools.listTools({});
    expect(listed.filter((tool) => MCP_TOOLS.includes(tool.name)).map((tool) => `${tool.name}:${tool.tier}`)).toEqual([
      'add:read_only',
      'echo:side_effecting',
      'fail:side_effecting',
      'grow:side_effecting',
      'note:side_effecting',
      'remove:side_effecting',
      'slow:side_effecting',
    ]);
    expect(await call('add', { a: 20, b: 22 }, httpTools)).toMatchObject({ ok: true, output: '42' });
    expect(await call('slow', { steps: 3, delayMs: 20 }, httpTools)).toMatchObject({ ok: true, output: 'counted to 3' });
  });

  it('opens a new session when the server restarts', async () => {
    await http.close();
    await http.listen();
    await expect.poll(async () => (await call('add', { a: 1, b: 1 }, httpTools)).ok, { timeout: 15_000, interval: 250 }).toBe(true);
    expect(http.sessions).toBeGreaterThanOrEqual(2);
    expect(bridge.stderr()).toContain('the MCP server is back');
  });
});

describe('agentbus mcp on its way out', () => {
  it('exits 2 on a usage error and 1 when the server cannot start', async () => {
    const env = mcpEnv();
    const [usage, missing] = await Promise.all([
      runAgentbus(['mcp', '--nats', stack.server.url], { cwd: ROOT, env, timeoutMs: 15_000 }),
      runAgentbus(['mcp', '--nats', stack.server.url, '--', 'agentbus-no-such-mcp-server', '--key', 'mcp-test-secret-4f9a1c'], { cwd: ROOT, env: { ...env, MCP_TEST_API_KEY: 'mcp-test-secret-4f9a1c' }, timeoutMs: 15_000 }),
    ]);
    expect(usage.code).toBe(2);
    expect(usage.stderr).toMatch(/mcp needs an MCP server/);
    expect(missing.code).toBe(1);
    expect(missing.stderr).toMatch(/could not start the MCP server agentbus-no-such-mcp-server --key \[REDACTED:configured-secret\]: .*ENOENT/);
    expect(missing.stderr).not.toContain('mcp-test-secret-4f9a1c');
  });

  it('leaves $SRV, closes the server and exits 0 on SIGTERM', async () => {
    const echoed = await call('echo', { text: 'who serves?' });
    const pid = echoed.ok ? (echoed.output as { pid: number }).pid : -1;
    expect(alive(pid)).toBe(true);
    expect(await mcp.stop()).toBe(0);
    expect(mcp.stderr()).toContain('stopping: leaving $SRV');
    expect((await tools.listTools({})).filter((tool) => MCP_TOOLS.includes(tool.name))).toEqual([]);
    await expect.poll(() => alive(pid), { timeout: 5_000 }).toBe(false);
  });
});
