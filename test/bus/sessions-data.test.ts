import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { jetstreamManager } from '@nats-io/jetstream';
import type { JetStreamManager } from '@nats-io/jetstream';
import { Kvm } from '@nats-io/kv';
import type { NatsConnection } from '@nats-io/nats-core';
import { connect } from '@nats-io/transport-node';
import { z } from 'zod';
import { startMemoryService } from '../../services/memory/index.ts';
import { createMemoryClient } from '../../src/bus/memory-client.ts';
import type { MemoryService } from '../../services/memory/index.ts';
import { createAgentbusClient } from '../../src/client/index.ts';
import type { AgentbusClient } from '../../src/client/index.ts';
import { SessionBusyError, SessionDeletedError } from '../../src/errors.ts';
import { createCodec } from '../../src/protocol/index.ts';
import type { LogEvent } from '../../src/protocol/index.ts';
import { defineTool } from '../../src/tool-sdk/index.ts';
import { requestJson, requestRaw, silentLogger, startStack } from '../helpers/stack.ts';
import type { TestStack } from '../helpers/stack.ts';

const codec = createCodec();
const tenant = 'data';
let stack: TestStack;
let sdk: AgentbusClient;
let jsm: JetStreamManager;
const memories: Array<{ nc: NatsConnection; service: MemoryService }> = [];

// A tool that holds the calls of the sessions listed here until they are let go (or the call is cancelled).
const held = new Map<string, () => void>();
const hold = defineTool({
  name: 'hold',
  description: 'waits while the test holds the calling session',
  parameters: z.object({}),
  tier: 'side_effecting',
  timeoutMs: 60_000,
  idempotent: true,
  execute: async (_args, { sessionId, signal }) => {
    if (!sessionId.startsWith('busy-')) return 'checked';
    await new Promise<void>((resolve, reject) => {
      held.set(sessionId, resolve);
      signal.addEventListener('abort', () => reject(signal.reason), { once: true });
    });
    return 'let go';
  },
});

async function startMemory(): Promise<MemoryService> {
  const nc = await connect({ servers: stack.server.url });
  const service = await startMemoryService({ nc, logger: silentLogger() });
  await service.caughtUp;
  memories.push({ nc, service });
  return service;
}

/** One whole turn through the SDK; resolves with how it ended. */
async function turn(sessionId: string, text: string): Promise<string> {
  return (await sdk.ask({ tenant, sessionId }, { text }, { timeoutMs: 20_000 })).reason;
}

/** Every event of a session's history, page by page. */
async function allHistory(sessionId: string, limit: number): Promise<{ events: LogEvent[]; pages: number }> {
  const events: LogEvent[] = [];
  let afterSeq: number | undefined;
  let pages = 0;
  do {
    const page = await sdk.history({ tenant, sessionId }, { limit, ...(afterSeq === undefined ? {} : { afterSeq }) });
    expect(page.events.length).toBeLessThanOrEqual(limit);
    events.push(...page.events);
    afterSeq = page.nextAfterSeq;
    pages += 1;
  } while (afterSeq !== undefined);
  return { events, pages };
}

async function logMessages(sessionId: string): Promise<number> {
  const subject = `agentbus.${tenant}.sessions.${sessionId}.log`;
  const info = await jsm.streams.info('AGENTBUS_LOG', { subjects_filter: subject });
  return info.state.subjects?.[subject] ?? 0;
}

async function liveMessages(sessionId: string): Promise<number> {
  const info = await jsm.streams.info('AGENTBUS_LIVE', { subjects_filter: `agentbus.${tenant}.sessions.${sessionId}.live.>` });
  return Object.values(info.state.subjects ?? {}).reduce((sum, count) => sum + count, 0);
}

async function leaseHeld(sessionId: string): Promise<boolean> {
  const leases = await new Kvm(stack.client).open('AGENTBUS_LEASES');
  return (await leases.get(`${tenant}.${sessionId}`))?.operation === 'PUT';
}

/** True when memory (whichever instance answers) lists the session. */
async function listed(sessionId: string): Promise<boolean> {
  return (await sdk.listSessions(tenant, { limit: 500 })).sessions.some((session) => session.sessionId === sessionId);
}

/** The sessions a memory search hits (whichever instance answers). */
async function searchHits(query: string): Promise<string[]> {
  return (await createMemoryClient({ nc: stack.client, codec }).search(tenant, { query, k: 20 })).hits.map((hit) => hit.sessionId);
}

beforeAll(async () => {
  stack = await startStack({
    script: { responses: [{ text: 'Let me check.', toolCalls: [{ name: 'hold', args: {} }] }, { text: 'All checked.' }] },
    extraTools: [hold],
  });
  sdk = createAgentbusClient({ nc: stack.client });
  jsm = await jetstreamManager(stack.client);
  await startMemory();
  await startMemory();
}, 60_000);

afterAll(async () => {
  for (const release of held.values()) release();
  for (const { nc, service } of memories) {
    await service.stop().catch(() => undefined);
    await nc.close().catch(() => undefined);
  }
  await stack?.stop();
});

describe('session history, read from the log', () => {
  it('pages through a session of several turns in log order, with no gaps or repeats', async () => {
    expect(await turn('history-1', 'first question')).toBe('yielded');
    expect(await turn('history-1', 'second question')).toBe('yielded');
    expect(await turn('history-1', 'third question')).toBe('yielded');
    const whole = await sdk.history({ tenant, sessionId: 'history-1' }, { limit: 500 });
    expect(whole.nextAfterSeq).toBeUndefined();
    expect(whole.events.map((event) => event.type)).toEqual([
      'session.created',
      'user.message',
      'turn.started',
      'assistant.message',
      'tool.use',
      'tool.result',
      'assistant.message',
      'turn.ended',
      'user.message',
      'turn.started',
      'assistant.message',
      'turn.ended',
      'user.message',
      'turn.started',
      'assistant.message',
      'turn.ended',
    ]);
    expect(whole.events.filter((event) => event.type === 'user.message').map((event) => event.data.text)).toEqual(['first question', 'second question', 'third question']);
    expect(whole.events.every((event) => event.tenant === tenant && event.sessionId === 'history-1')).toBe(true);
    // Every message of the session's log subject, in stream order.
    expect(whole.events.length).toBe(await logMessages('history-1'));

    const paged = await allHistory('history-1', 3);
    // 16 events, 3 to a page.
    expect(paged.pages).toBe(6);
    const seqs = paged.events.map((event) => event.seq!);
    expect(seqs).toEqual(whole.events.map((event) => event.seq));
    expect(new Set(seqs).size).toBe(seqs.length);
    expect([...seqs].sort((a, b) => a - b)).toEqual(seqs);
    // A page after the end is empty and has no next page.
    expect(await sdk.history({ tenant, sessionId: 'history-1' }, { afterSeq: seqs.at(-1)! })).toEqual({ events: [] });
  }, 60_000);

  it('starts at the newest turn memory has indexed with fromLastTurn, and refuses it beside afterSeq', async () => {
    const whole = await sdk.history({ tenant, sessionId: 'history-1' }, { limit: 500 });
    const lastStart = whole.events.filter((event) => event.type === 'turn.started').at(-1)!;
    // Memory indexes the log as it follows it: the last turn's start shows once it has caught up.
    await expect.poll(async () => (await sdk.history({ tenant, sessionId: 'history-1' }, { fromLastTurn: true })).events[0]?.seq, { timeout: 10_000 }).toBe(lastStart.seq);
    const fromLast = await sdk.history({ tenant, sessionId: 'history-1' }, { fromLastTurn: true });
    expect(fromLast.events.map((event) => event.type)).toEqual(['turn.started', 'assistant.message', 'turn.ended']);
    expect(fromLast.nextAfterSeq).toBeUndefined();
    // Paged: the next page goes on with afterSeq as always.
    const first = await sdk.history({ tenant, sessionId: 'history-1' }, { fromLastTurn: true, limit: 1 });
    expect(first.events.map((event) => event.type)).toEqual(['turn.started']);
    expect(first.nextAfterSeq).toBe(lastStart.seq);
    const both = await requestJson(stack.client, `agentbus.${tenant}.sessions.history-1.history`, { fromLastTurn: true, afterSeq: 3 });
    expect(both).toMatchObject({ error: { code: 'invalid_input' } });
  });

  it('answers not_found for a session that never was, invalid_input for a bad request', async () => {
    await expect(sdk.history({ tenant, sessionId: 'never-was' })).rejects.toMatchObject({ code: 'not_found' });
    await expect(sdk.history({ tenant, sessionId: 'history-1' }, { limit: 0 })).rejects.toMatchObject({ code: 'invalid_input' });
    const unknownField = await requestJson(stack.client, `agentbus.${tenant}.sessions.history-1.history`, { limit: 2, from: 3 });
    expect(unknownField).toMatchObject({ error: { code: 'invalid_input' } });
    const malformed = await requestRaw(stack.client, `agentbus.${tenant}.sessions.history-1.history`, new Uint8Array([0x82, 0xa1]), 'application/msgpack');
    expect(malformed).toMatchObject({ error: { code: 'invalid_input' } });
  });
});

describe('deleting a session', () => {
  it('refuses while a turn runs (busy), and deletes once it is cancelled', async () => {
    const sessionId = 'busy-1';
    const { turnId } = await sdk.prompt({ tenant, sessionId }, { text: 'hold on' });
    await expect.poll(() => held.has(sessionId), { timeout: 10_000 }).toBe(true);
    const refused = await sdk.deleteSession({ tenant, sessionId }).catch((error: unknown) => error);
    expect(refused).toBeInstanceOf(SessionBusyError);
    expect(refused).toMatchObject({ code: 'busy', retryable: true });
    expect(await logMessages(sessionId)).toBeGreaterThan(0);
    expect(await sdk.cancel({ tenant, sessionId })).toMatchObject({ ok: true, turnId });
    // busy is retryable: the session goes idle a moment after its turn.ended is logged.
    await expect
      .poll(async () => sdk.deleteSession({ tenant, sessionId }).then((deleted) => deleted.purged, (error: Error) => error.name), { timeout: 10_000 })
      .toBeGreaterThan(0);
    expect(await logMessages(sessionId)).toBe(0);
  }, 30_000);

  it('removes it from the log and live streams, from every memory instance, and its lease', async () => {
    const sessionId = 'doomed-1';
    expect(await turn(sessionId, 'The secret word is periwinkle.')).toBe('yielded');
    expect(await turn(sessionId, 'Say it again.')).toBe('yielded');
    // Memory has it, twice over; the log, the live stream and the lease hold it.
    for (const { service } of memories) await expect.poll(() => service.size() > 0, { timeout: 10_000 }).toBe(true);
    await expect.poll(() => listed(sessionId), { timeout: 10_000 }).toBe(true);
    await expect.poll(async () => (await sdk.history({ tenant, sessionId })).events.length).toBeGreaterThan(0);
    const search = () => searchHits('periwinkle');
    await expect.poll(search, { timeout: 10_000 }).toContain(sessionId);
    const logged = await logMessages(sessionId);
    expect(logged).toBeGreaterThan(0);
    expect(await liveMessages(sessionId)).toBeGreaterThan(0);
    expect(await leaseHeld(sessionId)).toBe(true);

    expect(await sdk.deleteSession({ tenant, sessionId })).toEqual({ purged: logged, alreadyDeleted: false });
    expect(await logMessages(sessionId)).toBe(0);
    expect(await liveMessages(sessionId)).toBe(0);
    expect(await leaseHeld(sessionId)).toBe(false);
    // Each memory instance answers in turn (a queue group): ask enough times that both have answered.
    for (let round = 0; round < 6; round++) {
      await expect.poll(() => listed(sessionId), { timeout: 5_000 }).toBe(false);
      await expect.poll(search, { timeout: 5_000 }).not.toContain(sessionId);
    }
    await expect(sdk.history({ tenant, sessionId })).rejects.toBeInstanceOf(SessionDeletedError);
    // The other sessions are untouched.
    expect((await sdk.history({ tenant, sessionId: 'history-1' }, { limit: 500 })).events.length).toBe(16);
  }, 60_000);

  it('refuses every later message to the deleted id with session_deleted, and takes no lease for it', async () => {
    const sessionId = 'doomed-1';
    const prompt = await requestJson(stack.client, `agentbus.${tenant}.sessions.${sessionId}.prompt`, { text: 'are you there?' });
    expect(prompt).toMatchObject({ accepted: false, error: { code: 'session_deleted', retryable: false } });
    await expect(sdk.prompt({ tenant, sessionId }, { text: 'hello again' })).rejects.toBeInstanceOf(SessionDeletedError);
    for (const [verb, body] of [
      ['cancel', {}],
      ['steer', { text: 'also this' }],
      ['approve', { toolCallId: 'x', approved: true }],
    ] as const) {
      expect(await requestJson(stack.client, `agentbus.${tenant}.sessions.${sessionId}.${verb}`, body), verb).toMatchObject({ ok: false, error: { code: 'session_deleted' } });
    }
    expect(await logMessages(sessionId)).toBe(0);
    expect(await leaseHeld(sessionId)).toBe(false);
    // A second delete finds it deleted and says so.
    expect(await sdk.deleteSession({ tenant, sessionId })).toEqual({ purged: 0, alreadyDeleted: true });
  });

  it('is not listed by a memory started after it, nor is a session whose tombstone is there but whose log was not purged', async () => {
    // A delete cut short after its tombstone (its node died): the log still holds the session.
    expect(await turn('half-deleted', 'The half-deleted fact is marmalade.')).toBe('yielded');
    await expect.poll(() => listed('half-deleted'), { timeout: 10_000 }).toBe(true);
    await stack.runtime.stop();
    const tombstones = await new Kvm(stack.client).open('AGENTBUS_TOMBSTONES');
    await tombstones.create(`${tenant}.half-deleted`, codec.encode({ deletedAt: Date.now(), node: 'test' }));
    await stack.startRuntime();
    expect(await logMessages('half-deleted')).toBeGreaterThan(0);

    for (const { service } of memories.splice(0)) await service.stop();
    const late = await startMemory();
    expect(late.size()).toBeGreaterThan(0);
    const sessions = (await sdk.listSessions(tenant, { limit: 500 })).sessions.map((session) => session.sessionId);
    expect(sessions).toContain('history-1');
    expect(sessions).not.toContain('doomed-1');
    expect(sessions).not.toContain('half-deleted');
    expect(await searchHits('marmalade')).not.toContain('half-deleted');
    await expect(sdk.history({ tenant, sessionId: 'half-deleted' })).rejects.toMatchObject({ code: 'session_deleted' });
    // The runtime refuses it too, and a delete finishes what the first one left.
    await expect(sdk.prompt({ tenant, sessionId: 'half-deleted' }, { text: 'hi' })).rejects.toMatchObject({ code: 'session_deleted' });
    const finished = await sdk.deleteSession({ tenant, sessionId: 'half-deleted' });
    expect(finished.alreadyDeleted).toBe(true);
    expect(finished.purged).toBeGreaterThan(0);
    expect(await logMessages('half-deleted')).toBe(0);
  }, 60_000);

  it('answers not_found for a session that never was, invalid_input for a bad body or id', async () => {
    await expect(sdk.deleteSession({ tenant, sessionId: 'never-was' })).rejects.toMatchObject({ code: 'not_found' });
    expect(await leaseHeld('never-was')).toBe(false);
    expect(await requestJson(stack.client, `agentbus.${tenant}.sessions.history-1.delete`, { everything: true })).toMatchObject({ ok: false, error: { code: 'invalid_input' } });
    expect(await requestRaw(stack.client, `agentbus.${tenant}.sessions.bad$id.delete`, '')).toMatchObject({ ok: false, error: { code: 'invalid_input' } });
    expect(await logMessages('history-1')).toBe(16);
  });
});
