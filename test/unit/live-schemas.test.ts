import { describe, expect, expectTypeOf, it } from 'vitest';
import type { z } from 'zod';
import { AgentbusError, ErrorCode, InvalidInputError, ProviderError, toErrorData } from '../../src/errors.ts';
import { LiveEventType, createCodec, createEnvelopeFactory, createSubjects, decodePrompt, decodeSessionEvent, generateChunkSchema, liveEventSchema } from '../../src/protocol/index.ts';
import type { LiveEvent } from '../../src/protocol/index.ts';

const codec = createCodec();
const subjects = createSubjects();
let counter = 0;
const envelopes = createEnvelopeFactory({ newId: () => `id-${++counter}`, now: () => 1_700_000_000_000 });
const session = { tenant: 'acme', sessionId: 's-1' };
// stepScope (turn-actors.ts): every event of a step carries the turn and the step.
const step = { ...session, turnId: 'turn-1', step: 2 };

/** The event as a client reads it: msgpack bytes on its `live.<type>` subject, decoded and validated. */
const received = (event: LiveEvent) => decodeSessionEvent(codec, subjects, { subject: subjects.live(event.tenant, event.sessionId, event.type), data: codec.encode(event) });

/** What the runtime makes of a provider's `retry` chunk: the chunk as the provider client validates it. */
const providerRetry = codec.validate(generateChunkSchema, {
  v: 1,
  requestId: 'r-1',
  seq: 3,
  type: 'retry',
  attempt: 2,
  maxAttempts: 4,
  delayMs: 1000,
  error: toErrorData(new ProviderError('rate_limited', '429 Too Many Requests', { retryable: true, status: 429, provider: 'openai' })),
});
if (providerRetry.type !== 'retry') throw new Error('not a retry chunk');

/** The refusal a prompt of junk gets (runtime.ts handle → publishError). */
function refusal(): ReturnType<typeof toErrorData> {
  try {
    decodePrompt(codec, codec.encode({ text: 'hi', temperature: 2 }));
  } catch (error) {
    return toErrorData(error);
  }
  throw new Error('the prompt was accepted');
}

// One event of each shape the runtime publishes (services/runtime: step-stream.ts, tool-execution.ts, prepare-step.ts, turn-actors.ts, session-host.ts, runtime.ts),
// built the way each `live.publish` call site builds its data.
const published: Array<[string, LiveEvent]> = [
  ['assistant.delta (streamOnce, step-stream.ts)', envelopes.create(LiveEventType.assistantDelta, step, { text: 'Hel' })],
  ['assistant.delta of whitespace', envelopes.create(LiveEventType.assistantDelta, step, { text: '\n ' })],
  ['progress of a provider call (streamOnce)', envelopes.create(LiveEventType.progress, step, { kind: 'provider_call', message: '[2/8] Calling scripted:default', step: 2, maxSteps: 8 })],
  [
    'progress of a tool batch (executeTools)',
    envelopes.create(LiveEventType.progress, step, { kind: 'tool_execution', message: '[2/8] Executing tools: read_file, list_dir', step: 2, maxSteps: 8, toolNames: ['read_file', 'list_dir'] }),
  ],
  ['progress of a rolling summary (compact)', envelopes.create(LiveEventType.progress, step, { kind: 'rolling_summary', message: '[2/8] Summarizing the earlier conversation', step: 2, maxSteps: 8 })],
  ['state of the turn machine (inspect)', envelopes.create(LiveEventType.state, { ...session, turnId: 'turn-1' }, { machine: 'turn', value: 'ToolExecution', event: 'xstate.done.actor.stream' })],
  ['state of the session machine with no turn (inspect)', envelopes.create(LiveEventType.state, session, { machine: 'session', value: 'idle', event: 'xstate.init' })],
  [
    'retry of an interrupted stream (streamWithRestart)',
    envelopes.create(LiveEventType.retry, step, {
      attempt: 2,
      maxAttempts: 3,
      delayMs: 250,
      error: toErrorData(new AgentbusError(ErrorCode.streamInterrupted, 'chunks 4..6 lost', { retryable: true })),
      model: 'scripted:default',
    }),
  ],
  [
    "retry passed on from a provider's chunk (streamOnce)",
    envelopes.create(LiveEventType.retry, step, {
      attempt: providerRetry.attempt,
      maxAttempts: providerRetry.maxAttempts,
      delayMs: providerRetry.delayMs,
      error: providerRetry.error,
      model: 'openai:gpt-5.4-mini',
    }),
  ],
  [
    'retry moving to the next model (stream onSwitch)',
    envelopes.create(LiveEventType.retry, step, {
      attempt: 2,
      maxAttempts: 2,
      delayMs: 0,
      error: toErrorData(new ProviderError('circuit_open', 'openai is failing', { provider: 'openai' })),
      model: 'openai:gpt-5.4-mini',
      nextModel: 'anthropic:claude-sonnet-5',
    }),
  ],
  ['error of a refused prompt (runtime publishError)', envelopes.create(LiveEventType.error, session, { ...refusal(), subject: 'agentbus.acme.sessions.s-1.prompt' })],
  ['error of an internal failure', envelopes.create(LiveEventType.error, session, { ...toErrorData(new Error('boom')), subject: 'agentbus.acme.sessions.s-1.steer' })],
  [
    'request.prepared of a dry run (session-host.ts dryRun)',
    envelopes.create(LiveEventType.requestPrepared, { ...session, turnId: 'turn-1', step: 1 }, {
      model: 'scripted:default',
      messages: [
        { role: 'system', content: 'You are a helpful agent.' },
        { role: 'assistant', content: '', toolCalls: [{ id: 'call_1', name: 'read_file', args: { path: 'a' } }] },
        { role: 'tool', toolCallId: 'call_1', name: 'read_file', content: 'text' },
        { role: 'user', content: 'hello' },
      ],
      tools: [{ name: 'read_file', description: 'Reads a file', parameters: { type: 'object', properties: { path: { type: 'string' } } } }],
      maxOutputTokens: 4096,
      maxSteps: 8,
      needsCompaction: false,
      forceTool: { name: 'read_file', args: { path: 'a' } },
    }),
  ],
  // Declared in events.ts; no runtime code publishes it yet.
  ['tool.progress', envelopes.create(LiveEventType.toolProgress, step, { toolCallId: 'call-1', name: 'read_file', message: 'read 2 of 3 files' })],
];

describe('the live event schema', () => {
  it('covers every live event type', () => {
    expect(new Set(published.map(([, event]) => event.type))).toEqual(new Set(Object.values(LiveEventType)));
  });

  it.each(published)('takes what the runtime publishes: %s', (_, event) => {
    expect(received(event)).toEqual(event);
  });

  it('takes every event the types allow', () => {
    expectTypeOf<LiveEvent>().toExtend<z.input<typeof liveEventSchema>>();
    expectTypeOf<z.output<typeof liveEventSchema>>().toExtend<LiveEvent>();
  });

  it('reads an event with fields it does not know, dropping them', () => {
    const event = envelopes.create(LiveEventType.progress, step, { kind: 'provider_call', message: '[2/8] Calling m', step: 2, maxSteps: 8 });
    const newer = { ...event, trace: 'abc', data: { ...event.data, etaMs: 300 } };
    expect(codec.validate(liveEventSchema, newer)).toEqual(event);
  });

  it.each([
    ['an assistant.delta whose data is a number', { type: 'assistant.delta', data: 5 }, 'data: Invalid input: expected object, received number'],
    ['an assistant.delta whose text is a number', { type: 'assistant.delta', data: { text: 5 } }, 'data.text: Invalid input: expected string, received number'],
    ['a progress of an unknown kind', { type: 'progress', data: { kind: 'thinking', message: 'm', step: 1, maxSteps: 8 } }, 'data.kind: Invalid option'],
    ['a progress with a fractional step', { type: 'progress', data: { kind: 'provider_call', message: 'm', step: 1.5, maxSteps: 8 } }, 'data.step: Invalid input: expected int, received number'],
    ['a state without its value', { type: 'state', data: { machine: 'turn', event: 'x' } }, 'data.value: Invalid input: expected string, received undefined'],
    ['a retry whose error is a string', { type: 'retry', data: { attempt: 2, maxAttempts: 3, delayMs: 1, error: 'boom' } }, 'data.error: Invalid input: expected object, received string'],
    ['an error without retryable', { type: 'error', data: { code: 'invalid_input', message: 'm' } }, 'data.retryable: Invalid input: expected boolean, received undefined'],
    ['a log event type', { type: 'turn.ended', data: { reason: 'yielded', usage: { inputTokens: 0, outputTokens: 0 }, cost: 0, steps: 1 } }, 'type: Invalid discriminator value'],
    ['an event of v2', { v: 2, type: 'assistant.delta', data: { text: 'x' } }, 'v: Invalid input: expected 1'],
    ['an event without an id', { id: '', type: 'assistant.delta', data: { text: 'x' } }, 'id: Too small'],
    ['an event whose tenant is no subject token', { type: 'assistant.delta', tenant: 'a b', data: { text: 'x' } }, 'tenant: tenant must be a subject token'],
  ])('refuses %s', (_, fields, message) => {
    const value = { v: 1, id: 'id-x', tenant: 'acme', sessionId: 's-1', ts: 1, ...fields };
    expect(() => codec.validate(liveEventSchema, value, 'live event')).toThrow(InvalidInputError);
    expect(() => codec.validate(liveEventSchema, value, 'live event')).toThrow(`invalid live event: ${message}`);
  });
});
