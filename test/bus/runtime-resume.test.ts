import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { jetstream, jetstreamManager } from '@nats-io/jetstream';
import { z } from 'zod';
import { LogEventType, createCodec, createEnvelopeFactory, createSubjects } from '../../src/protocol/index.ts';
import type { AgentEvent, EventDataMap } from '../../src/protocol/index.ts';
import { createToolWorker, defineTool } from '../../src/tool-sdk/index.ts';
import type { ToolWorker } from '../../src/tool-sdk/index.ts';
import { connect } from '@nats-io/transport-node';
import type { NatsConnection } from '@nats-io/nats-core';
import { collectEvents, requestJson, silentLogger, startStack } from '../helpers/stack.ts';
import type { TestStack } from '../helpers/stack.ts';

// A turn left unfinished in the log by a node that died, resumed by the node that opens the session next. Whether
// its open side-effecting call may have run is read from the log: it went out only once its tool.use was logged.

const codec = createCodec();
const subjects = createSubjects();
/** Runs of the `bump` tool by session: a side effect, not idempotent. */
const bumps = new Map<string, number>();
const bump = defineTool({
  name: 'bump',
  description: 'a side effect that must not run twice',
  parameters: z.object({}),
  tier: 'side_effecting',
  timeoutMs: 5000,
  idempotent: false,
  execute: (_args, { sessionId }) => {
    bumps.set(sessionId, (bumps.get(sessionId) ?? 0) + 1);
    return 'bumped';
  },
});

/** The effectId each run of the idempotent `touch` tool was sent under, by session. */
const touchedUnder = new Map<string, string[]>();
const touch = defineTool({
  name: 'touch',
  description: 'an idempotent side effect, keyed on its effectId',
  parameters: z.object({}),
  tier: 'side_effecting',
  timeoutMs: 5000,
  idempotent: true,
  execute: (_args, { sessionId, effectId }) => {
    touchedUnder.set(sessionId, [...(touchedUnder.get(sessionId) ?? []), effectId]);
    return 'touched';
  },
});

/** `bump` again, served by a worker that keeps no ledger: the runtime must decide on its own. */
const bumpUnrecorded = defineTool({ ...bump, name: 'bump_unrecorded' });

let stack: TestStack;
let plainConnection: NatsConnection;
let plainWorker: ToolWorker;

beforeAll(async () => {
  stack = await startStack({ script: { responses: [{ text: 'resumed turn done' }, { text: 'next turn done' }] }, extraTools: [bump, touch], runtime: { ledgerMaxBytes: 4_000_000 } });
  plainConnection = await connect({ servers: stack.server.url });
  plainWorker = createToolWorker({ nc: plainConnection, subjects, codec, logger: silentLogger(), tools: [bumpUnrecorded], version: '1.0.0', serviceName: 'plain-tools', ledger: false });
  await plainWorker.start();
});

afterAll(async () => {
  await plainWorker?.stop();
  await plainConnection?.close();
  await stack?.stop();
});

/** Writes a session's log as a node that died mid-turn left it: the model asked for `tool`; `used` logs its tool.use. */
async function logDiedMidTurn(sessionId: string, used: boolean, tool = 'bump'): Promise<void> {
  let id = 0;
  const envelopes = createEnvelopeFactory({ newId: () => `${sessionId}-e${id++}`, now: Date.now });
  const scope = { tenant: 'default', sessionId, turnId: 't1', step: 1 };
  const usage = { inputTokens: 1, outputTokens: 1 };
  const events: Array<{ [T in keyof EventDataMap]: [T, EventDataMap[T]] }[keyof EventDataMap]> = [
    [LogEventType.sessionCreated, { createdBy: 'node-gone' }],
    [LogEventType.userMessage, { text: 'bump it' }],
    [LogEventType.assistantMessage, { text: '', toolCalls: [{ id: 'c1', name: tool, args: {} }], usage, cost: 0, model: 'scripted:default', finishReason: 'tool_calls' }],
  ];
  if (used) events.push([LogEventType.toolUse, { toolCallId: 'c1', effectId: `${sessionId}:t1:c1`, name: tool, args: {}, tier: 'side_effecting', argsFinal: true }]);
  const js = jetstream(stack.client);
  for (const [type, data] of events) {
    const envelope = envelopes.create(type, type === LogEventType.sessionCreated ? { tenant: 'default', sessionId } : scope, data as never);
    await js.publish(subjects.log('default', sessionId), codec.encode(envelope), { msgID: envelope.id });
  }
}

type LoggedEvent = { [T in keyof EventDataMap]: [T, EventDataMap[T], number] }[keyof EventDataMap];

/** Writes a session's log of one unfinished turn `t1`, each event at the step given with it. */
async function logTurn(sessionId: string, events: readonly LoggedEvent[]): Promise<void> {
  let id = 0;
  const envelopes = createEnvelopeFactory({ newId: () => `${sessionId}-e${id++}`, now: Date.now });
  const js = jetstream(stack.client);
  const all: LoggedEvent[] = [[LogEventType.sessionCreated, { createdBy: 'node-gone' }, 0], [LogEventType.userMessage, { text: 'go' }, 0], ...events];
  for (const [type, data, step] of all) {
    const scope = type === LogEventType.sessionCreated ? { tenant: 'default', sessionId } : { tenant: 'default', sessionId, turnId: 't1', ...(step > 0 ? { step } : {}) };
    const envelope = envelopes.create(type, scope, data as never);
    await js.publish(subjects.log('default', sessionId), codec.encode(envelope), { msgID: envelope.id });
  }
}

function asked(name: string, id: string): EventDataMap['assistant.message'] {
  return { text: '', toolCalls: [{ id, name, args: {} }], usage: { inputTokens: 1, outputTokens: 1 }, cost: 0, model: 'scripted:default', finishReason: 'tool_calls' };
}

/** Sends a prompt to the session (which opens it and resumes its unfinished turn) and waits for both turns to end. */
async function resumeWithPrompt(sessionId: string): Promise<AgentEvent[]> {
  const watcher = collectEvents(stack.client, 'default', sessionId);
  expect(await requestJson(stack.client, `agentbus.default.sessions.${sessionId}.prompt`, { text: 'and then?' })).toMatchObject({ accepted: true });
  const events = await watcher.until((seen) => seen.filter((event) => event.type === 'turn.ended').length === 2, 15_000);
  watcher.stop();
  return events;
}

describe('the result ledger the runtime makes', () => {
  it('keeps outcomes for the TTL, bounded in bytes when told', async () => {
    const info = await (await jetstreamManager(stack.client)).streams.info('KV_AGENTBUS_LEDGER');
    expect(info.config).toMatchObject({ max_bytes: 4_000_000, max_age: 24 * 60 * 60 * 1_000_000_000 });
  });
});

describe('a turn resumed from the log of a node that died', () => {
  it('runs an open side-effecting call whose tool.use was never logged as a first attempt: it never went out', async () => {
    await logDiedMidTurn('never-sent', false);
    const events = await resumeWithPrompt('never-sent');
    expect(bumps.get('never-sent')).toBe(1);
    expect(events.find((event) => event.type === 'tool.result')).toMatchObject({ data: { toolCallId: 'c1', isError: false, output: 'bumped' } });
    expect(events.find((event) => event.type === 'turn.ended')).toMatchObject({ turnId: 't1', data: { reason: 'yielded', text: 'resumed turn done' } });
  });

  it('sends an open side-effecting call whose tool.use was logged again as a repeat: its worker, finding no record, ends it interrupted', async () => {
    await logDiedMidTurn('sent', true);
    const events = await resumeWithPrompt('sent');
    expect(bumps.get('sent')).toBeUndefined();
    // The worker's answer (it keeps a ledger, so the runtime asked it), not the runtime's own.
    expect(events.find((event) => event.type === 'tool.result')).toMatchObject({
      data: { toolCallId: 'c1', isError: true, error: { code: 'interrupted', message: expect.stringContaining('may have run and recorded no outcome') } },
    });
    expect(events.find((event) => event.type === 'turn.ended')).toMatchObject({ turnId: 't1', data: { reason: 'yielded' } });
  });

  it('ends interrupted itself, without a call, an open side-effecting call that went out to workers keeping no ledger', async () => {
    await logDiedMidTurn('sent-unrecorded', true, 'bump_unrecorded');
    const events = await resumeWithPrompt('sent-unrecorded');
    expect(bumps.get('sent-unrecorded')).toBeUndefined();
    expect(events.find((event) => event.type === 'tool.result')).toMatchObject({
      data: { toolCallId: 'c1', isError: true, error: { code: 'interrupted', message: expect.stringContaining('was running when its runtime node stopped') } },
    });
  });
});

describe('a resumed turn of a model that reuses call ids', () => {
  it('runs the newest step’s open call_0, though an earlier step’s call_0 has a result', async () => {
    const sessionId = 'reused-id';
    await logTurn(sessionId, [
      [LogEventType.assistantMessage, asked('bump', 'call_0'), 1],
      [LogEventType.toolUse, { toolCallId: 'call_0', effectId: `${sessionId}:t1:1:call_0`, name: 'bump', args: {}, tier: 'side_effecting', argsFinal: true }, 1],
      [LogEventType.toolResult, { toolCallId: 'call_0', name: 'bump', output: 'bumped', isError: false, durationMs: 1 }, 1],
      [LogEventType.assistantMessage, asked('bump', 'call_0'), 2],
    ]);
    const events = await resumeWithPrompt(sessionId);
    expect(bumps.get(sessionId)).toBe(1);
    expect(events.find((event) => event.type === 'tool.result')).toMatchObject({ step: 2, data: { toolCallId: 'call_0', isError: false, output: 'bumped' } });
  });

  it('sends a repeat under the effectId its tool.use logged, in the format of the older runtime that logged it', async () => {
    const sessionId = 'old-effect-id';
    await logTurn(sessionId, [
      [LogEventType.assistantMessage, asked('touch', 'c1'), 1],
      [LogEventType.toolUse, { toolCallId: 'c1', effectId: `${sessionId}:t1:c1`, name: 'touch', args: {}, tier: 'side_effecting', argsFinal: true }, 1],
    ]);
    const events = await resumeWithPrompt(sessionId);
    expect(touchedUnder.get(sessionId)).toEqual([`${sessionId}:t1:c1`]);
    expect(events.find((event) => event.type === 'tool.use')).toMatchObject({ data: { toolCallId: 'c1', effectId: `${sessionId}:t1:c1` } });
  });
});
