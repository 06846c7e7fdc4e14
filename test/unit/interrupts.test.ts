import { describe, expect, it } from 'vitest';
import { z } from 'zod';
import { LogEventType, createCodec, createEnvelopeFactory, decodeApprove, decodeInput } from '../../src/protocol/index.ts';
import type { EventDataMap, LogEvent } from '../../src/protocol/index.ts';
import { defineTool } from '../../src/tool-sdk/index.ts';
import { executeToolCall } from '../../src/tool-sdk/execute-tool-call.ts';
import { isSettled } from '../../src/tool-sdk/recorded-call.ts';
import { answerInput, decideApproval } from '../../services/runtime/sessions/human-answers.ts';
import { awaitHuman } from '../../services/runtime/tools/human-wait.ts';
import type { AppendFn } from '../../services/runtime/sessions/session-writer.ts';
import type { ToolInfo } from '../../services/runtime/ports.ts';
import { parseAnswer, parseApprove } from '../../cli/approve.ts';
import { silentLogger } from '../helpers/stack.ts';

const codec = createCodec();
const bytes = (value: unknown) => codec.encode(value);
let counter = 0;
const envelopes = createEnvelopeFactory({ newId: () => `id-${++counter}`, now: () => 1_000 });
const where = { tenant: 't', sessionId: 's', turnId: 'turn-1', step: 1 };

/** An append that records what it was asked to log, as the session writer's exclusive job would. */
function recordingAppend() {
  const appended: Array<{ type: LogEventType; data: unknown }> = [];
  const append = (async (type: LogEventType, scope: { turnId?: string; step?: number }, data: EventDataMap[LogEventType]) => {
    appended.push({ type, data });
    return envelopes.create(type, { tenant: 't', sessionId: 's', ...scope }, data) as LogEvent;
  }) as AppendFn;
  return { appended, append };
}

const deployInfo: ToolInfo = {
  name: 'deploy',
  description: 'deploys',
  parameters: { type: 'object', properties: { target: { type: 'string', enum: ['prod', 'staging'] } }, required: ['target'], additionalProperties: false },
  tier: 'privileged',
  timeoutMs: 1000,
  idempotent: false,
} as ToolInfo;

const requested = envelopes.create(LogEventType.approvalRequested, where, { toolCallId: 'c1', name: 'deploy', args: { target: 'prod' }, deadline: 9_000, onTimeout: 'deny' }) as LogEvent;

describe('approval decisions on the wire', () => {
  it('accepts approve, deny, edit and respond, and refuses the combinations that make no sense', () => {
    expect(decodeApprove(codec, bytes({ toolCallId: 'c1', approved: true, args: { target: 'staging' } }))).toEqual({ toolCallId: 'c1', approved: true, args: { target: 'staging' } });
    expect(decodeApprove(codec, bytes({ toolCallId: 'c1', respond: 'done' }))).toEqual({ toolCallId: 'c1', respond: 'done' });
    expect(() => decodeApprove(codec, bytes({ toolCallId: 'c1' }))).toThrow(/approved or respond/);
    expect(() => decodeApprove(codec, bytes({ toolCallId: 'c1', approved: false, args: {} }))).toThrow(/approved: true/);
    expect(() => decodeApprove(codec, bytes({ toolCallId: 'c1', approved: true, respond: 'x' }))).toThrow(/respond/);
    expect(() => decodeApprove(codec, bytes({ toolCallId: 'c1', approved: true, args: [1] }))).toThrow();
  });

  it('takes an answer of any JSON value, but not a missing one', () => {
    expect(decodeInput(codec, bytes({ toolCallId: 'c1', answer: { n: 1 } }))).toEqual({ toolCallId: 'c1', answer: { n: 1 } });
    expect(decodeInput(codec, bytes({ toolCallId: 'c1', requestId: 'c1:1', answer: null }))).toEqual({ toolCallId: 'c1', requestId: 'c1:1', answer: null });
    expect(() => decodeInput(codec, bytes({ toolCallId: 'c1' }))).toThrow();
    expect(() => decodeInput(codec, bytes({ toolCallId: 'c1', answer: 1, extra: true }))).toThrow();
  });
});

describe('decideApproval', () => {
  const toolOf = async (name: string) => (name === 'deploy' ? deployInfo : undefined);

  it('logs edited args that match the tool schema, and refuses others without logging anything', async () => {
    const { appended, append } = recordingAppend();
    const bad = await decideApproval([requested], { toolCallId: 'c1', approved: true, args: { target: 'moon' } }, toolOf, append, 'turn-1');
    expect(bad).toMatchObject({ refused: { code: 'invalid_arguments' } });
    expect(appended).toEqual([]);
    const good = await decideApproval([requested], { toolCallId: 'c1', approved: true, args: { target: 'staging' } }, toolOf, append, 'turn-1');
    expect(good).toEqual({ accepted: { approved: true, args: { target: 'staging' } } });
    expect(appended).toEqual([{ type: LogEventType.approvalDecided, data: { toolCallId: 'c1', approved: true, args: { target: 'staging' } } }]);
  });

  it('logs a respond as not approved, and refuses a second decision', async () => {
    const { appended, append } = recordingAppend();
    const outcome = await decideApproval([requested], { toolCallId: 'c1', respond: 'by hand' }, toolOf, append, 'turn-1');
    expect(outcome).toEqual({ accepted: { approved: false, respond: 'by hand' } });
    const decided = envelopes.create(LogEventType.approvalDecided, where, { toolCallId: 'c1', approved: false, respond: 'by hand' }) as LogEvent;
    expect(await decideApproval([requested, decided], { toolCallId: 'c1', approved: true }, toolOf, append, 'turn-1')).toMatchObject({ refused: { code: 'not_found' } });
    expect(appended).toHaveLength(1);
  });
});

describe('answerInput', () => {
  const asked = envelopes.create(LogEventType.toolInputRequested, where, { toolCallId: 'c2', name: 'pick', requestId: 'c2:1', question: 'Which?', schema: { type: 'string', enum: ['a', 'b'] }, deadline: 5_000 }) as LogEvent;

  it('logs an answer that matches the schema before the deadline, and refuses a wrong one, a late one and another request', async () => {
    const { appended, append } = recordingAppend();
    expect(await answerInput([asked], { toolCallId: 'c2', answer: 'z' }, 1_000, append, 'turn-1')).toMatchObject({ refused: { code: 'invalid_input' } });
    expect(await answerInput([asked], { toolCallId: 'c2', answer: 'a' }, 5_000, append, 'turn-1')).toMatchObject({ refused: { code: 'timeout' } });
    expect(await answerInput([asked], { toolCallId: 'c2', requestId: 'c2:2', answer: 'a' }, 1_000, append, 'turn-1')).toMatchObject({ refused: { code: 'not_found' } });
    expect(appended).toEqual([]);
    expect(await answerInput([asked], { toolCallId: 'c2', answer: 'a' }, 1_000, append, 'turn-1')).toEqual({ accepted: { requestId: 'c2:1' } });
    expect(appended).toEqual([{ type: LogEventType.toolInputAnswered, data: { toolCallId: 'c2', requestId: 'c2:1', answer: 'a' } }]);
  });
});

describe('context.ask in the tool SDK', () => {
  const tool = defineTool({
    name: 'pick',
    description: 'asks twice',
    parameters: z.object({}),
    tier: 'side_effecting',
    timeoutMs: 1000,
    idempotent: false,
    execute: async (_args, context) => `${String(await context.ask('first?', { schema: { type: 'string' } }))}+${String(await context.ask('second?'))}`,
  });
  const run = (inputs?: Array<{ requestId: string; question: string; answer: unknown }>) =>
    executeToolCall({
      tool,
      request: { v: 1, callId: 'k', effectId: 'e', name: 'pick', args: {}, tenant: 't', sessionId: 's', turnId: 'u', deadline: Date.now() + 1000, ...(inputs ? { inputs } : {}) },
      logger: () => silentLogger(),
      signal: new AbortController().signal,
      now: Date.now,
    });

  it('replies input_required with the first unanswered question, and the output once every question has its answer', async () => {
    const first = await run();
    expect(first).toMatchObject({ ok: false, error: { code: 'input_required' }, inputRequest: { question: 'first?', schema: { type: 'string' } } });
    expect(isSettled(first)).toBe(false);
    expect(await run([{ requestId: 'c:1', question: 'first?', answer: 'a' }])).toMatchObject({ ok: false, inputRequest: { question: 'second?' } });
    expect(await run([
      { requestId: 'c:1', question: 'first?', answer: 'a' },
      { requestId: 'c:2', question: 'second?', answer: 'b' },
    ])).toMatchObject({ ok: true, output: 'a+b' });
  });
});

describe('the CLI and the dashboard', () => {
  it('parses approve and answer into the bodies the runtime takes', () => {
    expect(parseApprove(['s1', 'c1']).decision).toEqual({ toolCallId: 'c1', approved: true });
    expect(parseApprove(['s1', 'c1', '--deny', '--reason', 'no']).decision).toEqual({ toolCallId: 'c1', approved: false, reason: 'no' });
    expect(parseApprove(['s1', 'c1', '--args', '{"target":"staging"}']).decision).toEqual({ toolCallId: 'c1', approved: true, args: { target: 'staging' } });
    expect(parseApprove(['s1', 'c1', '--respond', 'by hand']).decision).toEqual({ toolCallId: 'c1', respond: 'by hand' });
    expect(() => parseApprove(['s1', 'c1', '--args', '[1]'])).toThrow(/JSON object/);
    expect(() => parseApprove(['s1', 'c1', '--deny', '--respond', 'x'])).toThrow(/--respond/);
    expect(parseAnswer(['s1', 'c1', '{"n":1}', '--json']).answer).toEqual({ toolCallId: 'c1', answer: { n: 1 } });
    expect(parseAnswer(['s1', 'c1', 'main', '--request', 'c1:1']).answer).toEqual({ toolCallId: 'c1', requestId: 'c1:1', answer: 'main' });
  });

  it('shows an edit, a respond, a timeout and a question on the dashboard timeline', async () => {
    // The dashboard's browser module (plain JS, no types): loaded by URL.
    const format = new URL('../../services/dashboard/static/format.js', import.meta.url).href;
    const { describe: describeEvent } = (await import(format)) as { describe(event: object): string };
    expect(describeEvent({ type: 'approval.decided', data: { toolCallId: 'c1', approved: true, args: { target: 'staging' } } })).toBe('approved with edited args {"target":"staging"}');
    expect(describeEvent({ type: 'approval.decided', data: { toolCallId: 'c1', approved: false, respond: 'by hand' } })).toBe("answered in the tool's place: by hand");
    expect(describeEvent({ type: 'approval.decided', data: { toolCallId: 'c1', approved: false, reason: 'approval timed out', timedOut: true } })).toBe('denied: approval timed out (timed out)');
    expect(describeEvent({ type: 'tool.input_requested', data: { name: 'pick', question: 'Which branch?' } })).toBe('pick asks: Which branch?');
  });
});

describe('awaitHuman (the wait of AwaitingApproval)', () => {
  /** Services with a log held in memory: appends go to `events`, as the session writer's would. */
  function fakeServices(events: LogEvent[], config: { approvalTimeoutMs: number; approvalTimeoutDecision: 'deny' | 'approve' }, now = () => Date.now()) {
    const append = (async (type: LogEventType, scope: { turnId?: string; step?: number }, data: EventDataMap[LogEventType]) => {
      const event = envelopes.create(type, { tenant: 't', sessionId: 's', ...scope }, data) as LogEvent;
      events.push(event);
      return event;
    }) as AppendFn;
    return {
      transcript: { turnEvents: () => events.filter((event) => event.turnId === 'turn-1') },
      writer: { append, exclusive: <R>(job: (append: AppendFn) => Promise<R>) => job(append) },
      now,
      config,
    } as unknown as Parameters<typeof awaitHuman>[0];
  }
  const input = (call: Record<string, unknown> = {}) =>
    ({ turnId: 'turn-1', model: 'scripted:default', step: 1, maxSteps: 8, call: { id: 'c1', name: 'deploy', args: { target: 'prod' }, tier: 'privileged', ...call } }) as Parameters<typeof awaitHuman>[1];

  it('asks once with a deadline and, when it passes, logs and returns the configured default decision', async () => {
    const events: LogEvent[] = [];
    const answer = await awaitHuman(fakeServices(events, { approvalTimeoutMs: 5, approvalTimeoutDecision: 'approve' }), input(), new AbortController().signal);
    expect(answer).toEqual({ kind: 'approval', decision: { approved: true, reason: 'approval timed out', timedOut: true } });
    expect(events.map((event) => event.type)).toEqual([LogEventType.approvalRequested, LogEventType.approvalDecided]);
    expect(events[0]!.data).toMatchObject({ toolCallId: 'c1', onTimeout: 'approve', deadline: expect.any(Number) });
  });

  it('keeps the logged deadline and default of a resumed request instead of asking again', async () => {
    const events: LogEvent[] = [envelopes.create(LogEventType.approvalRequested, where, { toolCallId: 'c1', name: 'deploy', args: {}, deadline: Date.now() - 1, onTimeout: 'deny' }) as LogEvent];
    const started = Date.now();
    const answer = await awaitHuman(fakeServices(events, { approvalTimeoutMs: 60_000, approvalTimeoutDecision: 'approve' }), input(), new AbortController().signal);
    expect(Date.now() - started).toBeLessThan(1_000);
    expect(answer).toEqual({ kind: 'approval', decision: { approved: false, reason: 'approval timed out', timedOut: true } });
    expect(events.filter((event) => event.type === LogEventType.approvalRequested)).toHaveLength(1);
  });

  it('returns a decision the log already holds, and a logged answer or input_timeout for a question at its deadline', async () => {
    const decided: LogEvent[] = [
      envelopes.create(LogEventType.approvalRequested, where, { toolCallId: 'c1', name: 'deploy', args: {}, deadline: Date.now() + 60_000 }) as LogEvent,
      envelopes.create(LogEventType.approvalDecided, where, { toolCallId: 'c1', approved: true, args: { target: 'staging' } }) as LogEvent,
    ];
    expect(await awaitHuman(fakeServices(decided, { approvalTimeoutMs: 60_000, approvalTimeoutDecision: 'deny' }), input(), new AbortController().signal)).toEqual({
      kind: 'approval',
      decision: { approved: true, args: { target: 'staging' } },
    });
    const asking = { requestId: 'c1:1', question: 'Which?' };
    const question = envelopes.create(LogEventType.toolInputRequested, where, { toolCallId: 'c1', name: 'pick', ...asking, deadline: Date.now() - 1 }) as LogEvent;
    const config = { approvalTimeoutMs: 60_000, approvalTimeoutDecision: 'deny' as const };
    expect(await awaitHuman(fakeServices([question], config), input({ asking }), new AbortController().signal)).toEqual({ kind: 'input_timeout', requestId: 'c1:1' });
    const answered = envelopes.create(LogEventType.toolInputAnswered, where, { toolCallId: 'c1', requestId: 'c1:1', answer: 'main' }) as LogEvent;
    expect(await awaitHuman(fakeServices([question, answered], config), input({ asking }), new AbortController().signal)).toEqual({ kind: 'input', requestId: 'c1:1', answer: 'main' });
  });

  it('stops waiting with the signal\'s reason when the turn leaves AwaitingApproval', async () => {
    const controller = new AbortController();
    const waiting = awaitHuman(fakeServices([], { approvalTimeoutMs: 60_000, approvalTimeoutDecision: 'deny' }), input(), controller.signal);
    setTimeout(() => controller.abort(new Error('decided')), 20);
    await expect(waiting).rejects.toThrow('decided');
  });
});
