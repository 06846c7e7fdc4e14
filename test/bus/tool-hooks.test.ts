import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { z } from 'zod';
import { headers } from '@nats-io/nats-core';
import type { Msg, NatsConnection } from '@nats-io/nats-core';
import { connect } from '@nats-io/transport-node';
import { SafetyTier, createCodec, createSubjects } from '../../src/protocol/index.ts';
import type { AgentEvent, EventDataMap, GenerateRequest } from '../../src/protocol/index.ts';
import { createHookWorker, defineTool } from '../../src/tool-sdk/index.ts';
import type { HookWorker } from '../../src/tool-sdk/index.ts';
import type { ToolHookConfig } from '../../services/runtime/index.ts';
import { collectEvents, requestJson, silentLogger, startStack } from '../helpers/stack.ts';
import type { TestStack } from '../helpers/stack.ts';

// Tool hooks end to end: the real runtime, the scripted provider and a tool worker on a real nats-server, with hook
// services on the bus — one of the TypeScript SDK (policy before, redact after) and one as another language writes it
// (raw subscriptions answering JSON). What each hook does depends on the session, so one script serves every case.

const codec = createCodec();
const subjects = createSubjects('agentbus');
const PHONE = '555-0100';

/** How often the `note` tool ran, and with which arguments, by session. */
const runs = new Map<string, unknown[]>();
const note = defineTool({
  name: 'note',
  description: 'Takes a note',
  parameters: z.object({ text: z.string() }),
  tier: SafetyTier.sideEffecting,
  timeoutMs: 5000,
  idempotent: true,
  execute: (args, { sessionId }) => {
    runs.set(sessionId, [...(runs.get(sessionId) ?? []), args]);
    return `noted "${args.text}"; call Ada at ${PHONE}`;
  },
});
const SCRIPT = { responses: [{ toolCalls: [{ name: 'note', args: { text: 'hello' } }] }, { text: 'done' }] };

let stack: TestStack;
let hookConnection: NatsConnection;
const hookWorkers: HookWorker[] = [];
/** Every request the JSON hook `py` received, by session. */
const pyAsked = new Map<string, number>();
/** Every provider request, as the model would see it. */
const generated: GenerateRequest[] = [];

const hooks = (config: Partial<ToolHookConfig>): { toolHooks: ToolHookConfig } => ({ toolHooks: { before: [], after: [], timeoutMs: 1000, onError: 'block', ...config } });

beforeAll(async () => {
  stack = await startStack({ script: SCRIPT, extraTools: [note], runtime: hooks({ before: ['policy', 'py'], after: ['redact'] }) });
  hookConnection = await connect({ servers: stack.server.url });
  const policy = createHookWorker({
    nc: hookConnection,
    subjects,
    codec,
    logger: silentLogger(),
    name: 'policy',
    version: '1.0.0',
    before: async (call, { signal }) => {
      if (call.sessionId.startsWith('block')) return { action: 'block', output: `policy: ${call.name} is not allowed in ${call.sessionId}` };
      if (call.sessionId.startsWith('rewrite')) return { action: 'continue', args: { text: `${(call.args as { text: string }).text} (checked by policy)` } };
      if (call.sessionId.startsWith('slow')) await new Promise((resolve) => signal.addEventListener('abort', resolve));
      return { action: 'continue' };
    },
  });
  // The redact hook is a second worker of the same SDK, after-only.
  const redact = createHookWorker({
    nc: hookConnection,
    subjects,
    codec,
    logger: silentLogger(),
    name: 'redact',
    version: '1.0.0',
    after: (call) => (call.output.includes(PHONE) ? { action: 'continue', output: call.output.replaceAll(PHONE, '[phone]') } : { action: 'continue' }),
  });
  hookWorkers.push(policy, redact);
  await Promise.all(hookWorkers.map((worker) => worker.start()));
  // `py`, as a Python hook is written: a queue subscription that reads msgpack and answers JSON.
  hookConnection.subscribe(subjects.toolHook('py', 'before'), {
    queue: subjects.toolHookQueue('py'),
    callback: (_error, message: Msg) => {
      const call = codec.decode(message.data, message.headers?.get('Content-Type')) as { sessionId: string; callId: string };
      pyAsked.set(call.sessionId, (pyAsked.get(call.sessionId) ?? 0) + 1);
      const replyHeaders = headers();
      replyHeaders.set('Content-Type', 'application/json');
      let body: string = JSON.stringify({ v: 1, callId: call.callId, action: 'continue' });
      if (call.sessionId.startsWith('json')) body = JSON.stringify({ v: 1, action: 'block', output: 'blocked from Python', isError: false });
      if (call.sessionId.startsWith('malformed')) body = JSON.stringify({ v: 1, action: 'continue', arg: { text: 'typo' } });
      message.respond(new TextEncoder().encode(body), { headers: replyHeaders });
    },
  });
  stack.client.subscribe(subjects.providerGenerate('scripted'), {
    callback: (_error, message) => void generated.push(codec.decode(message.data, message.headers?.get('Content-Type')) as GenerateRequest),
  });
  await Promise.all([hookConnection.flush(), stack.client.flush()]);
}, 30_000);

afterAll(async () => {
  await Promise.all(hookWorkers.map((worker) => worker.stop()));
  await hookConnection?.close();
  await stack?.stop();
});

/** Runs one turn of `sessionId` and returns its events once it ended. */
async function turn(sessionId: string): Promise<AgentEvent[]> {
  const watcher = collectEvents(stack.client, 'default', sessionId);
  try {
    const reply = await requestJson(stack.client, `agentbus.default.sessions.${sessionId}.prompt`, { text: 'take a note' });
    expect(reply).toMatchObject({ accepted: true });
    return await watcher.until((events) => events.some((event) => event.type === 'turn.ended'), 15_000);
  } finally {
    watcher.stop();
  }
}

const dataOf = <T extends 'tool.use' | 'tool.result' | 'turn.ended' | 'assistant.message'>(events: AgentEvent[], type: T): EventDataMap[T] => {
  const found = events.find((event) => event.type === type);
  if (!found) throw new Error(`no ${type} in ${events.map((event) => event.type).join(', ')}`);
  return found.data as EventDataMap[T];
};
/** What the model was shown of the tool's result in its next provider call. */
const toolMessageSeen = (sessionId: string) =>
  generated.filter((request) => request.sessionId === sessionId).flatMap((request) => request.messages.filter((message) => message.role === 'tool')).at(-1);

describe('tool hooks of a runtime (before: policy, py; after: redact; on error: block)', () => {
  it('a before-hook blocks a call: no worker runs it, and its result is the hook’s output', async () => {
    const events = await turn('block-1');
    expect(runs.get('block-1')).toBeUndefined();
    expect(dataOf(events, 'tool.use')).toMatchObject({ name: 'note', args: { text: 'hello' } });
    expect(dataOf(events, 'tool.use')).not.toHaveProperty('argsRewrittenBy');
    expect(dataOf(events, 'tool.result')).toMatchObject({
      name: 'note',
      output: 'policy: note is not allowed in block-1',
      isError: true,
      error: { code: 'denied', message: 'blocked by tool hook policy' },
      blockedBy: 'policy',
    });
    // The chain stopped at the block: py was not asked, and the after-hook has nothing of a worker to rewrite.
    expect(pyAsked.get('block-1')).toBeUndefined();
    expect(dataOf(events, 'tool.result')).not.toHaveProperty('outputRewrittenBy');
    expect(toolMessageSeen('block-1')).toMatchObject({ content: 'policy: note is not allowed in block-1', isError: true });
    expect(dataOf(events, 'turn.ended')).toMatchObject({ reason: 'yielded', text: 'done' });
  });

  it('a before-hook rewrites the arguments: the worker gets them, and tool.use logs them and who rewrote them', async () => {
    const events = await turn('rewrite-1');
    expect(runs.get('rewrite-1')).toEqual([{ text: 'hello (checked by policy)' }]);
    expect(dataOf(events, 'tool.use')).toMatchObject({ args: { text: 'hello (checked by policy)' }, argsRewrittenBy: ['policy'] });
    // What the model asked for stays in its own message.
    expect(dataOf(events, 'assistant.message').toolCalls[0]).toMatchObject({ args: { text: 'hello' } });
    expect(pyAsked.get('rewrite-1')).toBe(1);
  });

  it('an after-hook rewrites a result before the model sees it', async () => {
    const events = await turn('after-1');
    expect(runs.get('after-1')).toEqual([{ text: 'hello' }]);
    const result = dataOf(events, 'tool.result');
    expect(result).toMatchObject({ output: 'noted "hello"; call Ada at [phone]', isError: false, outputRewrittenBy: ['redact'] });
    expect(toolMessageSeen('after-1')).toMatchObject({ content: 'noted "hello"; call Ada at [phone]' });
    expect(JSON.stringify(generated.filter((request) => request.sessionId === 'after-1'))).not.toContain(PHONE);
  });

  it('a hook that answers in JSON, as another language would, blocks a call with a result that is no error', async () => {
    const events = await turn('json-1');
    expect(runs.get('json-1')).toBeUndefined();
    expect(dataOf(events, 'tool.result')).toEqual(expect.objectContaining({ output: 'blocked from Python', isError: false, blockedBy: 'py' }));
    expect(dataOf(events, 'tool.result')).not.toHaveProperty('error');
  });

  it('a malformed hook reply blocks the call with hook_failed', async () => {
    const events = await turn('malformed-1');
    expect(runs.get('malformed-1')).toBeUndefined();
    expect(dataOf(events, 'tool.result')).toMatchObject({
      isError: true,
      blockedBy: 'py',
      error: { code: 'hook_failed', message: expect.stringContaining('tool hook py (before) failed: invalid_input: malformed reply: invalid before hook reply: Unrecognized key: "arg"') },
    });
    expect(dataOf(events, 'tool.result').output).toMatch(/^hook_failed: tool hook py \(before\) failed/);
  });

  it('a hook that does not answer in time blocks the call with hook_failed', async () => {
    const started = Date.now();
    const events = await turn('slow-1');
    expect(runs.get('slow-1')).toBeUndefined();
    expect(dataOf(events, 'tool.result')).toMatchObject({
      isError: true,
      blockedBy: 'policy',
      // Whichever comes first: the runtime's wait running out, or the hook worker answering `timeout` at the
      // request's deadline (a millisecond earlier, by its own clock).
      error: { code: 'hook_failed', message: expect.stringMatching(/^tool hook policy \(before\) failed: timeout: (no answer on agentbus\.hooks\.policy\.before within 1000 ms|the before hook ran past the caller's deadline)/), retryable: true },
    });
    expect(Date.now() - started).toBeLessThan(8000);
  });

  it('a cancel while a before-hook is asked ends the turn at once: the call closed cancelled, never sent, never logged as used', async () => {
    const watcher = collectEvents(stack.client, 'default', 'slow-cancel-1');
    expect(await requestJson(stack.client, 'agentbus.default.sessions.slow-cancel-1.prompt', { text: 'take a note' })).toMatchObject({ accepted: true });
    await watcher.until((events) => events.some((event) => event.type === 'assistant.message'));
    await new Promise((resolve) => setTimeout(resolve, 100));
    const cancelled = Date.now();
    expect(await requestJson(stack.client, 'agentbus.default.sessions.slow-cancel-1.cancel', {})).toMatchObject({ ok: true });
    const events = await watcher.until((seen) => seen.some((event) => event.type === 'turn.ended'), 15_000);
    watcher.stop();
    // Well within the hook's 1 s timeout: the hook request was abandoned, not waited for.
    expect(Date.now() - cancelled).toBeLessThan(900);
    expect(dataOf(events, 'turn.ended')).toMatchObject({ reason: 'cancelled' });
    expect(dataOf(events, 'tool.result')).toMatchObject({ isError: true, error: { code: 'cancelled' } });
    expect(events.some((event) => event.type === 'tool.use')).toBe(false);
    expect(runs.get('slow-cancel-1')).toBeUndefined();
  });
});

describe('a hook that is down', () => {
  it('blocks every call with hook_failed under the default failure mode', async () => {
    await stack.runtime.stop();
    await stack.startRuntime(hooks({ before: ['ghost'] }));
    const events = await turn('down-block-1');
    expect(runs.get('down-block-1')).toBeUndefined();
    expect(dataOf(events, 'tool.result')).toMatchObject({
      output: 'hook_failed: tool hook ghost (before) failed: no_responders: no hook process answers on agentbus.hooks.ghost.before',
      isError: true,
      blockedBy: 'ghost',
      error: { code: 'hook_failed', retryable: true },
    });
    expect(dataOf(events, 'turn.ended')).toMatchObject({ reason: 'yielded' });
  });

  it('lets the call run under onError continue, as it does a hook that times out, and the hooks that answer still apply', async () => {
    await stack.runtime.stop();
    await stack.startRuntime(hooks({ before: ['ghost', 'policy'], after: ['gone', 'redact'], onError: 'continue' }));
    const down = await turn('down-continue-1');
    expect(runs.get('down-continue-1')).toEqual([{ text: 'hello' }]);
    expect(dataOf(down, 'tool.result')).toMatchObject({ output: 'noted "hello"; call Ada at [phone]', isError: false, outputRewrittenBy: ['redact'] });
    const slow = await turn('slow-continue-1');
    expect(runs.get('slow-continue-1')).toEqual([{ text: 'hello' }]);
    expect(dataOf(slow, 'tool.result')).toMatchObject({ isError: false, output: 'noted "hello"; call Ada at [phone]' });
  });
});

describe('without hooks configured', () => {
  it('sends nothing to hook subjects: a call costs no extra round trip', async () => {
    await stack.runtime.stop();
    await stack.startRuntime({ toolHooks: { before: [], after: [], timeoutMs: 1000, onError: 'block' } });
    const hookTraffic: string[] = [];
    const spy = stack.client.subscribe('agentbus.hooks.>', { callback: (_error, message) => void hookTraffic.push(message.subject) });
    await stack.client.flush();
    const events = await turn('plain-1');
    expect(runs.get('plain-1')).toEqual([{ text: 'hello' }]);
    expect(dataOf(events, 'tool.result')).toEqual(expect.objectContaining({ output: `noted "hello"; call Ada at ${PHONE}`, isError: false }));
    expect(dataOf(events, 'tool.result')).not.toHaveProperty('outputRewrittenBy');
    expect(hookTraffic).toEqual([]);
    spy.unsubscribe();
  });
});

describe('a privileged call', () => {
  let approvals: TestStack;
  let connection: NatsConnection;
  let audit: HookWorker;
  const asked: string[] = [];
  const launched: string[] = [];
  const launch = defineTool({
    name: 'launch',
    description: 'does something that needs a human yes',
    parameters: z.object({ target: z.string() }),
    tier: SafetyTier.privileged,
    timeoutMs: 5000,
    idempotent: false,
    execute: ({ target }) => (launched.push(target), `launched ${target}`),
  });

  beforeAll(async () => {
    approvals = await startStack({
      script: { responses: [{ toolCalls: [{ name: 'launch', args: { target: 'probe' } }] }, { text: 'all set' }] },
      extraTools: [launch],
      runtime: hooks({ before: ['gate'] }),
    });
    connection = await connect({ servers: approvals.server.url });
    audit = createHookWorker({
      nc: connection,
      subjects,
      codec,
      logger: silentLogger(),
      name: 'gate',
      version: '1.0.0',
      before: (call) => (asked.push(`${call.name} ${call.tier}`), { action: 'continue', args: { target: `${(call.args as { target: string }).target}-checked` } }),
    });
    await audit.start();
  }, 30_000);

  afterAll(async () => {
    await audit?.stop();
    await connection?.close();
    await approvals?.stop();
  });

  it('is asked about once approved, when it is about to run, not while it waits', async () => {
    const watcher = collectEvents(approvals.client, 'default', 'approve-1');
    await requestJson(approvals.client, 'agentbus.default.sessions.approve-1.prompt', { text: 'launch it' });
    const waiting = await watcher.until((events) => events.some((event) => event.type === 'approval.requested'));
    await new Promise((resolve) => setTimeout(resolve, 200));
    expect(asked).toEqual([]);
    const request = waiting.find((event) => event.type === 'approval.requested');
    const toolCallId = request?.type === 'approval.requested' ? request.data.toolCallId : '';
    await requestJson(approvals.client, 'agentbus.default.sessions.approve-1.approve', { toolCallId, approved: true });
    const events = await watcher.until((seen) => seen.some((event) => event.type === 'turn.ended'));
    watcher.stop();
    expect(asked).toEqual(['launch privileged']);
    expect(launched).toEqual(['probe-checked']);
    const types = events.map((event) => event.type);
    expect(types.indexOf('approval.decided')).toBeLessThan(types.indexOf('tool.use'));
    expect(dataOf(events, 'tool.use')).toMatchObject({ args: { target: 'probe-checked' }, argsRewrittenBy: ['gate'] });
    // The human approved what the model asked for; the approval request showed the model's arguments.
    expect(request?.data).toMatchObject({ args: { target: 'probe' } });
  });
});

describe('a call that went out before its runtime stopped', () => {
  let resumed: TestStack;
  let connection: NatsConnection;
  let once: HookWorker;
  const asked: unknown[] = [];
  const ran: unknown[] = [];
  let release: () => void = () => undefined;
  const released = new Promise<void>((resolve) => (release = resolve));
  const hold = defineTool({
    name: 'hold_note',
    description: 'takes a note once the test lets it',
    parameters: z.object({ text: z.string() }),
    tier: SafetyTier.sideEffecting,
    timeoutMs: 30_000,
    idempotent: true,
    execute: async (args, { signal }) => {
      ran.push(args);
      await Promise.race([released, new Promise((_resolve, reject) => signal.addEventListener('abort', () => reject(signal.reason)))]);
      return `noted ${args.text}`;
    },
  });

  beforeAll(async () => {
    resumed = await startStack({
      script: { responses: [{ toolCalls: [{ name: 'hold_note', args: { text: 'x' } }] }, { text: 'noted after the handoff' }] },
      extraTools: [hold],
      runtime: hooks({ before: ['once'] }),
    });
    connection = await connect({ servers: resumed.server.url });
    // Rewrites the first call it is asked about and blocks every later one: asked again, it would block the repeat.
    once = createHookWorker({
      nc: connection,
      subjects,
      codec,
      logger: silentLogger(),
      name: 'once',
      version: '1.0.0',
      before: (call) => {
        asked.push(call.args);
        return asked.length === 1 ? { action: 'continue', args: { text: 'x (checked)' } } : { action: 'block', output: 'asked twice' };
      },
    });
    await once.start();
  }, 30_000);

  afterAll(async () => {
    release();
    await once?.stop();
    await connection?.close();
    await resumed?.stop();
  });

  it('goes out again as it went out, on the node that resumes its turn, without asking the before-hooks again', async () => {
    const watcher = collectEvents(resumed.client, 'default', 'resume-1');
    await requestJson(resumed.client, 'agentbus.default.sessions.resume-1.prompt', { text: 'note it' });
    await expect.poll(() => ran.length, { timeout: 10_000 }).toBe(1);
    await resumed.runtime.stop();
    await resumed.startRuntime();
    await expect.poll(() => ran.length, { timeout: 10_000 }).toBe(2);
    release();
    const events = await watcher.until((seen) => seen.some((event) => event.type === 'turn.ended'), 15_000);
    watcher.stop();
    expect(asked).toEqual([{ text: 'x' }]);
    expect(ran).toEqual([{ text: 'x (checked)' }, { text: 'x (checked)' }]);
    const uses = events.filter((event) => event.type === 'tool.use');
    expect(uses.map((event) => event.data)).toEqual([
      expect.objectContaining({ args: { text: 'x (checked)' }, argsRewrittenBy: ['once'] }),
      expect.objectContaining({ args: { text: 'x (checked)' }, argsRewrittenBy: ['once'] }),
    ]);
    expect(dataOf(events, 'tool.result')).toMatchObject({ output: 'noted x (checked)', isError: false });
    expect(dataOf(events, 'turn.ended')).toMatchObject({ reason: 'yielded', text: 'noted after the handoff' });
  });
});
