import { describe, expect, expectTypeOf, it } from 'vitest';
import type { z } from 'zod';
import { CancelledError, TimeoutError, toErrorData } from '../../src/errors.ts';
import { INVALID_ARGUMENTS_KEY, LogEventType, TurnEndReason, createCodec, createEnvelopeFactory, decodeApprove, decodePrompt, logEventSchema } from '../../src/protocol/index.ts';
import type { LogEvent } from '../../src/protocol/index.ts';

const codec = createCodec();
let counter = 0;
const envelopes = createEnvelopeFactory({ newId: () => `id-${++counter}`, now: () => 1_700_000_000_000 });
const session = { tenant: 'acme', sessionId: 's-1' };
const step = { ...session, turnId: 'turn-1', step: 2 };
const usage = { inputTokens: 120, outputTokens: 7 };

/** The event as the session log reads it back: msgpack bytes, decoded and validated. */
const readBack = (event: LogEvent) => codec.validate(logEventSchema, codec.decode(codec.encode(event)), 'log event');

// One event of each shape the runtime appends (services/runtime: session-host.ts, turn-actors.ts, prepare-step.ts, step-stream.ts, tool-execution.ts), built the way
// each call site builds its data.
const written: Array<[string, LogEvent]> = [
  ['session.created (openSession)', envelopes.create(LogEventType.sessionCreated, session, { createdBy: 'node-1' })],
  ['session.forked (createSessionForker)', envelopes.create(LogEventType.sessionForked, session, { parentSessionId: 'parent-1', parentSeq: 42, forkedBy: 'node-1' })],
  [
    'user.message of a prompt with every field (HostedSession.prompt)',
    envelopes.create(
      LogEventType.userMessage,
      { ...session, turnId: 'turn-1' },
      decodePrompt(
        codec,
        codec.encode({
          text: 'hello',
          model: 'openai:gpt-5.4-mini',
          models: ['anthropic:claude-sonnet-5', 'ollama:qwen3'],
          smallModel: 'scripted:small',
          largeModel: 'scripted:large',
          complex: true,
          maxSteps: 3,
          maxCost: 0.5,
          metadata: { user: 'u-1', nested: { tags: ['a'] } },
        }),
      ),
    ),
  ],
  ['user.message of a plain-text prompt', envelopes.create(LogEventType.userMessage, { ...session, turnId: 'turn-1' }, decodePrompt(codec, new TextEncoder().encode('hi')))],
  ['user.message of a steer (prepare)', envelopes.create(LogEventType.userMessage, step, { text: 'also this', steer: true })],
  [
    'assistant.message with tool calls, one with arguments that were not JSON and an empty id (stream)',
    envelopes.create(LogEventType.assistantMessage, step, {
      text: '',
      toolCalls: [
        { id: 'call-1', name: 'read_file', args: { path: 'README.md' } },
        { id: '', name: 'list_dir', args: { [INVALID_ARGUMENTS_KEY]: '{path:', _parseError: 'Unexpected token' } },
      ],
      usage,
      cost: 0.0012,
      model: 'scripted:default',
      finishReason: 'tool_calls',
    }),
  ],
  ['assistant.message with text only', envelopes.create(LogEventType.assistantMessage, step, { text: 'done', toolCalls: [], usage: { inputTokens: 0, outputTokens: 0 }, cost: 0, model: 'openai:gpt-5.4-mini-2026-01-01', finishReason: 'stop' })],
  ...(['read_only', 'side_effecting', 'privileged', 'unknown'] as const).map((tier): [string, LogEvent] => [
    `tool.use of a ${tier} tool (runTool)`,
    envelopes.create(LogEventType.toolUse, step, { toolCallId: 'call-1', effectId: 's-1:turn-1:call-1', name: 'read_file', args: { path: 'README.md' }, tier }),
  ]),
  [
    'tool.use whose arguments a before-hook rewrote (runTool)',
    envelopes.create(LogEventType.toolUse, step, { toolCallId: 'call-1', effectId: 's-1:turn-1:call-1', name: 'write_file', args: { path: 'sandbox/a' }, tier: 'side_effecting', argsRewrittenBy: ['paths', 'policy'] }),
  ],
  [
    'tool.result of a call a before-hook blocked (runTool)',
    envelopes.create(LogEventType.toolResult, step, {
      toolCallId: 'call-1',
      name: 'write_file',
      output: 'writes are off today',
      isError: true,
      error: { code: 'denied', message: 'blocked by tool hook policy', retryable: false },
      durationMs: 3,
      blockedBy: 'policy',
    }),
  ],
  ['tool.result an after-hook rewrote (runTool)', envelopes.create(LogEventType.toolResult, step, { toolCallId: 'call-1', name: 'read_file', output: '[phone]', isError: false, durationMs: 9, outputRewrittenBy: ['redact'] })],
  ['tool.result of a call that ran (runTool)', envelopes.create(LogEventType.toolResult, step, { toolCallId: 'call-1', name: 'read_file', output: '# Demo', isError: false, durationMs: 14 })],
  [
    'tool.result of a failed call (runTool)',
    envelopes.create(LogEventType.toolResult, step, {
      toolCallId: 'call-2',
      name: 'nope',
      output: 'unknown_tool: unknown tool "nope"; available tools: none',
      isError: true,
      error: { code: 'unknown_tool', message: 'unknown tool "nope"; available tools: none', retryable: false },
      // A wall clock that stepped back.
      durationMs: -3,
    }),
  ],
  [
    'tool.result closing an open call (finishTurn)',
    envelopes.create(LogEventType.toolResult, { ...step, step: 8 }, {
      toolCallId: 'call-3',
      name: 'write_file',
      output: 'cancelled: the turn was cancelled before this call finished',
      isError: true,
      error: toErrorData(new CancelledError('the turn was cancelled before this call finished')),
      durationMs: 0,
    }),
  ],
  ['approval.requested (requestApproval)', envelopes.create(LogEventType.approvalRequested, step, { toolCallId: 'call-4', name: 'deploy', args: { target: 'prod' } })],
  ['approval.decided with a reason (approve)', envelopes.create(LogEventType.approvalDecided, { ...session, turnId: 'turn-1' }, { approved: false, ...decodeApprove(codec, codec.encode({ toolCallId: 'call-4', approved: false, reason: 'not today' })) })],
  ['approval.decided without a reason (approve)', envelopes.create(LogEventType.approvalDecided, { ...session, turnId: 'turn-1' }, { approved: true, ...decodeApprove(codec, codec.encode({ toolCallId: 'call-4', approved: true })) })],
  ['approval.requested with a deadline (requestApproval)', envelopes.create(LogEventType.approvalRequested, step, { toolCallId: 'call-4', name: 'deploy', args: { target: 'prod' }, deadline: 1_700_000_600_000, onTimeout: 'deny' })],
  ['approval.decided with edited args (approve)', envelopes.create(LogEventType.approvalDecided, step, { toolCallId: 'call-4', approved: true, args: { target: 'staging' } })],
  ['approval.decided answered in the tool\'s place (approve)', envelopes.create(LogEventType.approvalDecided, step, { toolCallId: 'call-4', approved: false, respond: 'deployed by hand' })],
  ['approval.decided by timeout (requestApproval)', envelopes.create(LogEventType.approvalDecided, step, { toolCallId: 'call-4', approved: false, reason: 'approval timed out', timedOut: true })],
  [
    'tool.input_requested (executeTools)',
    envelopes.create(LogEventType.toolInputRequested, step, { toolCallId: 'call-5', name: 'pick', requestId: 'call-5:1', question: 'Which branch?', schema: { type: 'string' }, deadline: 1_700_000_600_000 }),
  ],
  ['tool.input_answered (input)', envelopes.create(LogEventType.toolInputAnswered, step, { toolCallId: 'call-5', requestId: 'call-5:1', answer: 'main' })],
  ['summary.created (compact)', envelopes.create(LogEventType.summaryCreated, step, { text: 'They asked for the README.', throughSeq: 41, tokens: 6, model: 'scripted:default', usage, cost: 0.0004 })],
  ['summary.created of an older runtime', envelopes.create(LogEventType.summaryCreated, step, { text: 'They asked for the README.', throughSeq: 41, tokens: 6 })],
  [
    'summary.failed (compact)',
    envelopes.create(LogEventType.summaryFailed, step, { throughSeq: 41, model: 'scripted:default', error: { code: 'provider_error', message: 'summary model down', retryable: false } }),
  ],
  [
    'turn.started (startTurn)',
    envelopes.create(LogEventType.turnStarted, { ...session, turnId: 'turn-1' }, { model: 'scripted:default', models: ['openai:gpt-5.4-mini'], maxSteps: 8, maxCost: 0.5, deadline: 1767225600000, finalAnswer: true }),
  ],
  [
    'assistant.message of the last answer, with its telemetry (stream)',
    envelopes.create(LogEventType.assistantMessage, step, { text: 'what I found', toolCalls: [], usage, cost: 0.001, model: 'scripted:default', finishReason: 'stop', latencyMs: 120, firstTokenMs: 40, finalAnswer: true }),
  ],
  ['turn.ended deadline_exceeded (finishTurn)', envelopes.create(LogEventType.turnEnded, step, { reason: TurnEndReason.deadlineExceeded, error: { code: 'deadline_exceeded', message: 'the turn passed its deadline', retryable: false }, usage, cost: 0, steps: 1 })],
  ...Object.values(TurnEndReason).map((reason): [string, LogEvent] => [
    `turn.ended ${reason} (finishTurn)`,
    envelopes.create(LogEventType.turnEnded, step, { reason, usage, cost: 0.0012, steps: 2 }),
  ]),
  ['turn.ended with text (finishTurn, resumeQueue)', envelopes.create(LogEventType.turnEnded, step, { reason: TurnEndReason.yielded, text: 'done', usage, cost: 0, steps: 2 })],
  ['turn.ended with an error (finishTurn)', envelopes.create(LogEventType.turnEnded, step, { reason: TurnEndReason.timeout, error: toErrorData(new TimeoutError('provider took too long', 1000)), usage, cost: 0, steps: 1 })],
  ['session.created of a child session (an agent call)', envelopes.create(LogEventType.sessionCreated, session, { createdBy: 'node-1', parent: { sessionId: 'boss', turnId: 't1', toolCallId: 'call_0', effectId: 'boss:t1:1:call_0' } })],
  ['user.message of a child session, run as a profile', envelopes.create(LogEventType.userMessage, step, { text: 'task', profile: 'researcher', parent: { sessionId: 'boss', turnId: 't1', toolCallId: 'call_0', effectId: 'e' } })],
  ['tool.result of an agent call (runAgentTool)', envelopes.create(LogEventType.toolResult, step, { toolCallId: 'call_0', name: 'agent__researcher', output: '42', isError: false, durationMs: 5, child: { sessionId: 'sub-x', turnId: 't9' }, usage, cost: 0.02 })],
  ['tool.use of an agent call, naming its child (runTool)', envelopes.create(LogEventType.toolUse, step, { toolCallId: 'call_0', effectId: 'e', name: 'agent__researcher', args: { task: 't' }, tier: 'side_effecting', childSessionId: 'sub-x', argsFinal: true })],
  ['turn.handoff (runAgentTool)', envelopes.create(LogEventType.turnHandoff, step, { toolCallId: 'call_1', to: 'writer', from: 'front' })],
];

describe('the log event schema', () => {
  it('covers every durable event type', () => {
    expect(new Set(written.map(([, event]) => event.type))).toEqual(new Set(Object.values(LogEventType)));
  });

  it.each(written)('reads back what the runtime writes: %s', (_, event) => {
    expect(readBack(event)).toEqual(event);
  });

  it('takes every event the types allow', () => {
    expectTypeOf<LogEvent>().toExtend<z.input<typeof logEventSchema>>();
    expectTypeOf<z.output<typeof logEventSchema>>().toExtend<LogEvent>();
  });

  it('reads an event with fields it does not know, dropping them', () => {
    const event = envelopes.create(LogEventType.toolResult, step, { toolCallId: 'call-1', name: 'read_file', output: 'x', isError: false, durationMs: 1 });
    const newer = { ...event, trace: 'abc', data: { ...event.data, bytes: 1, metadata: { a: 1 } } };
    expect(codec.validate(logEventSchema, newer)).toEqual(event);
  });

  it.each([
    ['a tool.result whose data is a number', { type: 'tool.result', data: 5 }, 'data: Invalid input: expected object, received number'],
    ['a tool.result without isError', { type: 'tool.result', data: { toolCallId: 'c', name: 'n', output: 'o', durationMs: 1 } }, 'data.isError: Invalid input: expected boolean, received undefined'],
    ['an assistant.message whose tool call has no id', { type: 'assistant.message', data: { text: '', toolCalls: [{ name: 'n', args: {} }], usage, cost: 0, model: 'm', finishReason: 'stop' } }, 'data.toolCalls.0.id: Invalid input: expected string, received undefined'],
    ['an assistant.message with usage as text', { type: 'assistant.message', data: { text: '', toolCalls: [], usage: { inputTokens: '1', outputTokens: 1 }, cost: 0, model: 'm', finishReason: 'stop' } }, 'data.usage.inputTokens: Invalid input: expected number, received string'],
    ['a turn.ended with an unknown reason', { type: 'turn.ended', data: { reason: 'bored', usage, cost: 0, steps: 1 } }, 'data.reason: Invalid option'],
    ['a user.message with a model that is no <provider>:<model>', { type: 'user.message', data: { text: 'hi', model: 'a.b' } }, 'data.model: model must be <provider>:<model>'],
    ['a tool.use with an unknown tier', { type: 'tool.use', data: { toolCallId: 'c', effectId: 'e', name: 'n', args: {}, tier: 'root' } }, 'data.tier: Invalid option'],
    ['an unknown type', { type: 'assistant.delta', data: { text: 'x' } }, 'type: Invalid discriminator value'],
    ['an event of v2', { v: 2, type: 'session.created', data: { createdBy: 'n' } }, 'v: Invalid input: expected 1'],
    ['an event whose session id is no subject token', { type: 'session.created', sessionId: 'a.b', data: { createdBy: 'n' } }, 'sessionId: sessionId must be a subject token'],
  ])('refuses %s', (_, fields, message) => {
    const value = { v: 1, id: 'id-x', tenant: 'acme', sessionId: 's-1', ts: 1, ...fields };
    expect(() => codec.validate(logEventSchema, value, 'log event')).toThrow(`invalid log event: ${message}`);
  });
});
