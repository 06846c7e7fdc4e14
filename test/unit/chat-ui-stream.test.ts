import { describe, expect, it } from 'vitest';
import { readChatRequest } from '../../services/chat/chat-request.ts';
import { parseEventId } from '../../services/chat/turn-stream.ts';
import { createUiMessageEncoder } from '../../services/chat/ui-message-encoder.ts';
import type { UiChunk } from '../../services/chat/ui-message-encoder.ts';
import { InvalidInputError } from '../../src/errors.ts';
import type { AgentEvent } from '../../src/protocol/index.ts';

let id = 0;
const event = (type: string, step: number | undefined, data: Record<string, unknown>, turnId = 't1'): AgentEvent =>
  ({ v: 1, id: `e${++id}`, type, tenant: 'web', sessionId: 's', turnId, ...(step === undefined ? {} : { step }), ts: 0, data }) as unknown as AgentEvent;
const usage = { inputTokens: 1, outputTokens: 1 };
const delta = (step: number, text: string) => event('assistant.delta', step, { text });
const message = (step: number, text: string, toolCalls: unknown[] = []) => event('assistant.message', step, { text, toolCalls, usage, cost: 0, model: 'm', finishReason: 'stop' });
const ended = (reason: string, error?: { code: string; message: string }, output?: unknown) => event('turn.ended', undefined, { reason, usage, cost: 0.5, steps: 2, ...(error ? { error } : {}), ...(output === undefined ? {} : { output }) });
const encodeAll = (events: AgentEvent[]) => {
  const encoder = createUiMessageEncoder('t1');
  return { chunks: events.flatMap((each) => encoder.push(each)), encoder };
};
const textOf = (chunks: UiChunk[]) => chunks.filter((chunk) => chunk.type === 'text-delta').map((chunk) => chunk.delta).join('');

describe('a turn encoded as the UI message stream', () => {
  it('starts, steps, streams text, carries tools and finishes with the turn as metadata', () => {
    const { chunks, encoder } = encodeAll([
      event('turn.started', undefined, { model: 'm', maxSteps: 8, deadline: 0, finalAnswer: true }),
      delta(1, 'Let me '),
      delta(1, 'look.'),
      message(1, 'Let me look.', [{ id: 'c1', name: 'clock', args: {} }]),
      event('tool.use', 1, { toolCallId: 'c1', effectId: 'x', name: 'clock', args: { zone: 'UTC' }, tier: 'read_only' }),
      event('tool.result', 1, { toolCallId: 'c1', name: 'clock', output: '12:00', isError: false, durationMs: 1 }),
      delta(2, 'Noon.'),
      message(2, 'Noon.'),
      ended('yielded'),
    ]);
    expect(chunks).toEqual([
      { type: 'start', messageId: 't1' },
      { type: 'start-step' },
      { type: 'text-start', id: 'text-1' },
      { type: 'text-delta', id: 'text-1', delta: 'Let me ' },
      { type: 'text-delta', id: 'text-1', delta: 'look.' },
      { type: 'text-end', id: 'text-1' },
      { type: 'tool-input-available', toolCallId: 'c1', toolName: 'clock', input: { zone: 'UTC' }, dynamic: true },
      { type: 'tool-output-available', toolCallId: 'c1', output: '12:00', dynamic: true },
      { type: 'finish-step' },
      { type: 'start-step' },
      { type: 'text-start', id: 'text-2' },
      { type: 'text-delta', id: 'text-2', delta: 'Noon.' },
      { type: 'text-end', id: 'text-2' },
      { type: 'finish-step' },
      { type: 'finish', finishReason: 'stop', messageMetadata: { reason: 'yielded', usage, cost: 0.5, steps: 2 } },
    ]);
    expect(encoder.finished).toBe(true);
  });

  it('sends each piece of text once, whichever stream brings it first: deltas late, early, or missing', () => {
    const full = 'The whole answer.';
    // The message before its deltas (a resume from the log): the text at once, then the late deltas dropped.
    expect(textOf(encodeAll([message(1, full), delta(1, 'The whole '), delta(1, 'answer.'), ended('yielded')]).chunks)).toBe(full);
    // Some deltas, then the message: only the rest comes from the message.
    const some = encodeAll([delta(1, 'The who'), message(1, full), ended('yielded')]).chunks;
    expect(some.filter((chunk) => chunk.type === 'text-delta').map((chunk) => chunk.delta)).toEqual(['The who', 'le answer.']);
    // No deltas at all (a step whose live events expired).
    expect(textOf(encodeAll([message(1, full), ended('yielded')]).chunks)).toBe(full);
    // A late event of an earlier step does not reopen it.
    const late = encodeAll([delta(1, 'A'), message(1, 'A'), delta(2, 'B'), event('tool.result', 1, { toolCallId: 'c', name: 'n', output: 'o', isError: false, durationMs: 1 }), message(2, 'B'), ended('yielded')]).chunks;
    expect(late.filter((chunk) => chunk.type === 'start-step')).toHaveLength(2);
  });

  it('maps approvals, denials, tool errors, failures and cancels; ignores other turns and what comes after the end', () => {
    const { chunks } = encodeAll([
      event('turn.started', undefined, {}, 'other'),
      event('approval.requested', 1, { toolCallId: 'c1', name: 'run', args: {} }),
      event('tool.result', 1, { toolCallId: 'c1', name: 'run', output: 'approval denied', isError: true, error: { code: 'denied', message: 'approval denied' }, durationMs: 0 }),
      event('tool.result', 1, { toolCallId: 'c2', name: 'run', output: '', isError: true, error: { code: 'tool_failed', message: 'boom' }, durationMs: 0 }),
      ended('failed', { code: 'provider_error', message: 'the model is down' }),
      delta(3, 'after the end'),
    ]);
    // A privileged call's input comes with its approval request (its tool.use is logged only once it runs).
    expect(chunks.map((chunk) => chunk.type)).toEqual(['start', 'start-step', 'tool-input-available', 'tool-approval-request', 'tool-output-denied', 'tool-output-error', 'finish-step', 'error', 'finish']);
    expect(chunks[2]).toEqual({ type: 'tool-input-available', toolCallId: 'c1', toolName: 'run', input: {}, dynamic: true });
    expect(chunks[3]).toEqual({ type: 'tool-approval-request', approvalId: 'c1', toolCallId: 'c1' });
    expect(chunks[5]).toMatchObject({ errorText: 'boom' });
    expect(chunks[7]).toEqual({ type: 'error', errorText: 'the model is down' });
    expect(chunks[8]).toMatchObject({ finishReason: 'error' });
    expect(encodeAll([ended('cancelled')]).chunks.map((chunk) => chunk.type)).toEqual(['start', 'abort', 'finish']);
  });

  it('sends a later answer in the same step (an output retry, the last answer at maxSteps) as a text part of its own', () => {
    const { chunks } = encodeAll([
      delta(1, 'not json'),
      event('assistant.message', 1, { text: 'not json', toolCalls: [] }),
      delta(1, '{"ok":'),
      event('assistant.message', 1, { text: '{"ok":true}', toolCalls: [] }),
      ended('yielded'),
    ]);
    const texts = chunks.filter((chunk) => chunk.type === 'text-delta').map((chunk) => [chunk.id, chunk.delta]);
    expect(texts).toEqual([['text-1', 'not json'], ['text-1-1', '{"ok":true}']]);
    expect(chunks.filter((chunk) => chunk.type === 'text-end').map((chunk) => chunk.id)).toEqual(['text-1', 'text-1-1']);
  });

  it('pauses at an approval still awaited, and a stream that goes on after the decision updates the call it shows', () => {
    const first = createUiMessageEncoder('t1');
    const requested = [
      event('assistant.message', 1, { text: 'May I?', toolCalls: [{ id: 'c1', name: 'run', args: { x: 1 } }] }),
      event('approval.requested', 1, { toolCallId: 'c1', name: 'run', args: { x: 1 } }),
    ];
    const before = requested.flatMap((each) => first.push(each));
    expect(first.awaitingHuman).toEqual(['c1']);
    const paused = first.pause();
    expect(paused.map((chunk) => chunk.type)).toEqual(['finish-step', 'finish']);
    expect(paused[1]).toEqual({ type: 'finish', finishReason: 'tool-calls', messageMetadata: { reason: 'awaiting_approval' } });
    expect(first.finished).toBe(true);
    expect(before.filter((chunk) => chunk.type === 'tool-input-available')).toHaveLength(1);
    // A decision logged before the pause means nothing awaits.
    const decided = createUiMessageEncoder('t1');
    [...requested, event('approval.decided', 1, { toolCallId: 'c1', approved: true })].forEach((each) => decided.push(each));
    expect(decided.awaitingHuman).toEqual([]);
    // The stream after the approval: the call's tool.use sends no second input, its output updates the part.
    const next = createUiMessageEncoder('t1', { toolCallsShown: ['c1'] });
    const after = [
      event('approval.decided', 1, { toolCallId: 'c1', approved: true }),
      event('tool.use', 1, { toolCallId: 'c1', name: 'run', args: { x: 1 } }),
      event('tool.result', 1, { toolCallId: 'c1', name: 'run', output: 'ran', isError: false, durationMs: 1 }),
    ].flatMap((each) => next.push(each));
    expect(after.map((chunk) => chunk.type)).toEqual(['start', 'start-step', 'tool-output-available']);
  });

  it('shows a tool\'s question as a data part, pauses there as awaiting input, and shows the answer', () => {
    const schema = { type: 'string', enum: ['main', 'next'] };
    const asking = [
      event('tool.use', 1, { toolCallId: 'c1', effectId: 'x', name: 'pick', args: {}, tier: 'side_effecting' }),
      event('tool.input_requested', 1, { toolCallId: 'c1', name: 'pick', requestId: 'c1:1', question: 'Which branch?', schema, deadline: 1 }),
    ];
    const first = createUiMessageEncoder('t1');
    const chunks = asking.flatMap((each) => first.push(each));
    expect(chunks.at(-1)).toEqual({ type: 'data-agentbus-question', id: 'c1:1', data: { toolCallId: 'c1', requestId: 'c1:1', question: 'Which branch?', schema } });
    expect(first.awaitingHuman).toEqual(['c1:1']);
    expect(first.pause().at(-1)).toEqual({ type: 'finish', finishReason: 'tool-calls', messageMetadata: { reason: 'awaiting_input' } });

    // The stream after the answer: the answer as a part of its own, nothing awaited, the call's output updates its part.
    const next = createUiMessageEncoder('t1', { toolCallsShown: ['c1'] });
    const after = [
      event('tool.input_answered', 1, { toolCallId: 'c1', requestId: 'c1:1', answer: 'main' }),
      event('tool.result', 1, { toolCallId: 'c1', name: 'pick', output: 'released main', isError: false, durationMs: 1 }),
    ].flatMap((each) => next.push(each));
    expect(after.map((chunk) => chunk.type)).toEqual(['start', 'start-step', 'data-agentbus-answer', 'tool-output-available']);
    expect(after[2]).toEqual({ type: 'data-agentbus-answer', id: 'c1:1', data: { toolCallId: 'c1', requestId: 'c1:1', answer: 'main' } });
    expect(next.awaitingHuman).toEqual([]);

    // A question that timed out (the call's error result) awaits nothing either; no schema, no schema key.
    const timedOut = createUiMessageEncoder('t1');
    const noSchema = timedOut.push(event('tool.input_requested', 1, { toolCallId: 'c2', name: 'pick', requestId: 'c2:1', question: 'Notes?', deadline: 1 }));
    expect(noSchema.at(-1)).toEqual({ type: 'data-agentbus-question', id: 'c2:1', data: { toolCallId: 'c2', requestId: 'c2:1', question: 'Notes?' } });
    timedOut.push(event('tool.result', 1, { toolCallId: 'c2', name: 'pick', output: '', isError: true, error: { code: 'timeout', message: 'no answer' }, durationMs: 1 }));
    expect(timedOut.awaitingHuman).toEqual([]);
    // An approval and a question open together pause as awaiting approval.
    const both = createUiMessageEncoder('t1');
    [asking[1]!, event('approval.requested', 1, { toolCallId: 'c3', name: 'run', args: {} })].forEach((each) => both.push(each));
    expect(both.awaitingHuman).toEqual(['c3', 'c1:1']);
    expect(both.pause().at(-1)).toMatchObject({ messageMetadata: { reason: 'awaiting_approval' } });
  });

  it('puts a typed turn\'s output into the finish metadata, and nothing of the kind for an untyped one', () => {
    const typed = encodeAll([message(1, '{"n":2}'), ended('yielded', undefined, { n: 2 })]).chunks.at(-1);
    expect(typed).toEqual({ type: 'finish', finishReason: 'stop', messageMetadata: { reason: 'yielded', usage, cost: 0.5, steps: 2, output: { n: 2 } } });
    // A falsy output is still an output.
    expect(encodeAll([ended('yielded', undefined, 0)]).chunks.at(-1)).toMatchObject({ messageMetadata: { output: 0 } });
    expect(Object.keys(encodeAll([ended('yielded')]).chunks.at(-1)!['messageMetadata'] as object)).not.toContain('output');
  });
});

describe('chat requests and event ids', () => {
  const user = (text: string) => ({ id: 'u', role: 'user', parts: [{ type: 'text', text }] });
  it('takes the last user message as the prompt, and approval responses of an assistant message as decisions', () => {
    expect(readChatRequest({ id: 'chat-1', messages: [user('old'), { id: 'a', role: 'assistant', parts: [] }, user('new')] })).toEqual({ kind: 'prompt', sessionId: 'chat-1', text: 'new' });
    const responded = { id: 'a', role: 'assistant', parts: [
      { type: 'text', text: 'May I?' },
      { type: 'dynamic-tool', toolName: 'run', toolCallId: 'c1', state: 'approval-responded', approval: { id: 'c1', approved: true } },
      { type: 'tool-run', toolCallId: 'c2', state: 'approval-responded', approval: { id: 'c2', approved: false, reason: 'not today' } },
      { type: 'dynamic-tool', toolName: 'run', toolCallId: 'c3', state: 'output-available' },
    ] };
    expect(readChatRequest({ id: 'chat-1', messages: [user('go'), responded] })).toEqual({
      kind: 'respond',
      sessionId: 'chat-1',
      decisions: [{ toolCallId: 'c1', approved: true }, { toolCallId: 'c2', approved: false, reason: 'not today' }],
      answers: [],
    });
  });

  it('takes answers to tools\' questions from the body with the assistant message, and an outputSchema with a prompt', () => {
    const asked = { id: 'a', role: 'assistant', parts: [{ type: 'data-agentbus-question', id: 'c1:1', data: { toolCallId: 'c1', requestId: 'c1:1', question: 'Which?' } }] };
    expect(readChatRequest({ id: 'chat-1', messages: [user('go'), asked], answers: [{ toolCallId: 'c1', requestId: 'c1:1', answer: { branch: 'main' } }] })).toEqual({
      kind: 'respond',
      sessionId: 'chat-1',
      decisions: [],
      answers: [{ toolCallId: 'c1', requestId: 'c1:1', answer: { branch: 'main' } }],
    });
    const schema = { type: 'object', properties: { n: { type: 'integer' } } };
    expect(readChatRequest({ id: 'chat-1', messages: [user('count')], outputSchema: schema })).toEqual({ kind: 'prompt', sessionId: 'chat-1', text: 'count', outputSchema: schema });
    expect(() => readChatRequest({ id: 'chat-1', messages: [user('go')], answers: [{ toolCallId: 'c1', answer: 'x' }] })).toThrow(/assistant message that asked/);
    expect(() => readChatRequest({ id: 'chat-1', messages: [user('go'), asked], answers: [{ toolCallId: 'c1' }] })).toThrow(/answer is required/);
    expect(() => readChatRequest({ id: 'chat-1', messages: [user('go'), asked], answers: [{ toolCallId: 'c1', answer: 1, extra: true }] })).toThrow(InvalidInputError);
    expect(() => readChatRequest({ id: 'chat-1', messages: [user('count')], outputSchema: { type: 'string' } })).toThrow(/outputSchema/);
  });

  it('refuses what it cannot do, naming it', () => {
    const refusals: Array<[unknown, RegExp]> = [
      [null, /body/],
      [{ id: 'a b', messages: [user('x')] }, /chat id/],
      [{ id: 'a', messages: [{ id: 'a', role: 'assistant', parts: [{ type: 'text', text: 'hi' }] }] }, /last message must be/],
      [{ id: 'a', messages: [user('x')], trigger: 'regenerate-message' }, /fork/],
    ];
    for (const [body, message] of refusals) expect(() => readChatRequest(body), JSON.stringify(body)).toThrow(InvalidInputError);
    for (const [body, message] of refusals) expect(() => readChatRequest(body)).toThrow(message);
  });

  it('reads Last-Event-ID as <log>-<live>, and nothing else', () => {
    expect(parseEventId('12-340')).toEqual({ log: 12, live: 340 });
    for (const bad of [undefined, '', '12', '12-', 'a-b', '1-2-3', '-1-2']) expect(parseEventId(bad), String(bad)).toBeUndefined();
  });
});
