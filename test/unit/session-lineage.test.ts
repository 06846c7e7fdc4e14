import { describe, expect, it } from 'vitest';
import { historySegments, lastWholePoint, readSessionHistory } from '../../src/bus/session-lineage.ts';
import type { SessionLog, SessionLogReadOptions } from '../../src/bus/session-log.ts';
import { createCodec, createEnvelopeFactory, decodeFork, LogEventType } from '../../src/protocol/index.ts';
import type { EventDataMap, LogEvent } from '../../src/protocol/index.ts';
import { createSessionForker } from '../../services/runtime/sessions/session-fork.ts';
import { createLogger } from '../../src/logging.ts';

/** An in-memory log stream: one global sequence over every session, as AGENTBUS_LOG has. */
function createMemoryLog() {
  const stored: LogEvent[] = [];
  let id = 0;
  const envelopes = createEnvelopeFactory({ newId: () => `e${id++}`, now: () => 1_700_000_000_000 });
  const ofSession = (sessionId: string) => stored.filter((event) => event.sessionId === sessionId);
  const log: Pick<SessionLog, 'read' | 'lastSeq' | 'append'> & { reads: number } = {
    reads: 0,
    async read(_tenant: string, sessionId: string, options: SessionLogReadOptions = {}) {
      log.reads += 1;
      const after = options.after ?? 0;
      const through = options.through ?? Number.POSITIVE_INFINITY;
      const all = ofSession(sessionId).filter((event) => event.seq! > after && event.seq! <= through);
      const events = all.slice(0, options.limit ?? Number.POSITIVE_INFINITY);
      return { events, lastSeq: events.at(-1)?.seq ?? after, more: events.length < all.length };
    },
    async lastSeq(_tenant: string, sessionId: string) {
      return ofSession(sessionId).at(-1)?.seq ?? 0;
    },
    async append(event: LogEvent, expectedSeq: number) {
      if ((ofSession(event.sessionId).at(-1)?.seq ?? 0) !== expectedSeq) throw new (await import('../../src/errors.ts')).LogConflictError(event.sessionId, expectedSeq);
      const seq = stored.length + 1;
      stored.push({ ...event, seq });
      return seq;
    },
  };
  const add = <T extends LogEventType>(sessionId: string, type: T, turnId: string | undefined, data: EventDataMap[T]): number => {
    const seq = stored.length + 1;
    stored.push({ ...envelopes.create(type, { tenant: 't', sessionId, ...(turnId ? { turnId } : {}) }, data), seq } as LogEvent);
    return seq;
  };
  const usage = { inputTokens: 1, outputTokens: 1 };
  const turn = (sessionId: string, turnId: string, text: string) => ({
    prompt: add(sessionId, LogEventType.userMessage, turnId, { text }),
    ended: add(sessionId, LogEventType.turnEnded, turnId, { reason: 'yielded', usage, cost: 0, steps: 1 }),
  });
  return { log, stored, envelopes, add, turn };
}

describe('lastWholePoint', () => {
  it('is the event itself where every begun turn has ended, and cuts back to before an open turn', () => {
    const { stored, add, turn } = createMemoryLog();
    const created = add('s', LogEventType.sessionCreated, undefined, { createdBy: 'n' });
    const first = turn('s', 't1', 'one');
    const second = turn('s', 't2', 'two');
    expect(lastWholePoint(stored, second.ended)).toBe(second.ended);
    expect(lastWholePoint(stored, second.prompt)).toBe(first.ended);
    expect(lastWholePoint(stored, first.prompt)).toBe(created);
    expect(lastWholePoint(stored, 0)).toBeUndefined();
  });

  it('waits for a prompt queued during another turn, and does not count a steer as a turn', () => {
    const { stored, add } = createMemoryLog();
    add('s', LogEventType.sessionCreated, undefined, { createdBy: 'n' });
    const usage = { inputTokens: 1, outputTokens: 1 };
    const a = add('s', LogEventType.userMessage, 'a', { text: 'a' });
    add('s', LogEventType.userMessage, 'a', { text: 'steer', steer: true });
    add('s', LogEventType.userMessage, 'b', { text: 'queued' });
    const aEnded = add('s', LogEventType.turnEnded, 'a', { reason: 'yielded', usage, cost: 0, steps: 1 });
    const bEnded = add('s', LogEventType.turnEnded, 'b', { reason: 'yielded', usage, cost: 0, steps: 1 });
    expect(lastWholePoint(stored, aEnded)).toBe(a - 1);
    expect(lastWholePoint(stored, bEnded)).toBe(bEnded);
  });
});

describe('fork chains', () => {
  it('reads a fork of a fork through its parents, each cut at its fork point, in sequence order', async () => {
    const { log, add, turn } = createMemoryLog();
    add('root', LogEventType.sessionCreated, undefined, { createdBy: 'n' });
    const one = turn('root', 't1', 'one');
    add('child', LogEventType.sessionCreated, undefined, { createdBy: 'n' });
    add('child', LogEventType.sessionForked, undefined, { parentSessionId: 'root', parentSeq: one.ended, forkedBy: 'n' });
    turn('root', 't2', 'root only');
    turn('child', 't3', 'child only');
    add('grandchild', LogEventType.sessionCreated, undefined, { createdBy: 'n' });
    add('grandchild', LogEventType.sessionForked, undefined, { parentSessionId: 'child', parentSeq: 100, forkedBy: 'n' });
    expect(await historySegments(log, 't', 'grandchild')).toEqual([
      { sessionId: 'root', through: one.ended },
      { sessionId: 'child', through: 100 },
      { sessionId: 'grandchild', through: Number.POSITIVE_INFINITY },
    ]);
    const history = await readSessionHistory(log, 't', 'grandchild');
    const texts = history.events.flatMap((event) => (event.type === 'user.message' ? [event.data.text] : []));
    expect(texts).toEqual(['one', 'child only']);
    expect(history.inherited).toBe(history.events.length - 2);
    const seqs = history.events.map((event) => event.seq!);
    expect(seqs).toEqual([...seqs].sort((a, b) => a - b));
    expect(history.lastSeq).toBe(await log.lastSeq('t', 'grandchild'));
  });

  it('reads a session that is no fork with one read of its log, as before forks existed', async () => {
    const { log, add, turn } = createMemoryLog();
    add('plain', LogEventType.sessionCreated, undefined, { createdBy: 'n' });
    turn('plain', 't1', 'one');
    log.reads = 0;
    const history = await readSessionHistory(log, 't', 'plain');
    expect(log.reads).toBe(1);
    expect(history.inherited).toBe(0);
    expect(history.events).toHaveLength(3);
  });

  it('refuses a chain that loops rather than reading it forever', async () => {
    const { log, add } = createMemoryLog();
    add('a', LogEventType.sessionCreated, undefined, { createdBy: 'n' });
    add('a', LogEventType.sessionForked, undefined, { parentSessionId: 'b', parentSeq: 1, forkedBy: 'n' });
    add('b', LogEventType.sessionCreated, undefined, { createdBy: 'n' });
    add('b', LogEventType.sessionForked, undefined, { parentSessionId: 'a', parentSeq: 1, forkedBy: 'n' });
    await expect(historySegments(log, 't', 'a')).rejects.toThrow(/loops/);
    await expect(readSessionHistory(log, 't', 'a')).rejects.toThrow(/loops/);
  });
});

describe('the forker', () => {
  const setup = (deleted: string[] = []) => {
    const memory = createMemoryLog();
    let id = 0;
    const forker = createSessionForker({
      log: memory.log,
      tombstones: { isDeleted: async (_tenant, sessionId) => deleted.includes(sessionId) },
      envelopes: memory.envelopes,
      newId: () => `fork${id++}`,
      nodeId: 'node-1',
      logger: createLogger({ name: 'fork-test', level: 'silent' }),
    });
    return { ...memory, forker };
  };

  it('writes session.created and session.forked into the new session only, and answers where it cut', async () => {
    const { forker, stored, add, turn } = setup();
    add('src', LogEventType.sessionCreated, undefined, { createdBy: 'n' });
    const one = turn('src', 't1', 'one');
    const two = turn('src', 't2', 'two');
    const before = stored.length;
    expect(await forker.fork('t', 'src', { atSeq: two.prompt })).toEqual({ sessionId: 'fork0', atSeq: one.ended });
    expect(stored.slice(before).map((event) => [event.sessionId, event.type])).toEqual([
      ['fork0', 'session.created'],
      ['fork0', 'session.forked'],
    ]);
    expect(stored.at(-1)!.data).toEqual({ parentSessionId: 'src', parentSeq: one.ended, forkedBy: 'node-1' });
  });

  it('refuses a sequence of another session, a missing or deleted source, and an id in use or deleted', async () => {
    const { forker, add, turn } = setup(['gone', 'burnt']);
    add('src', LogEventType.sessionCreated, undefined, { createdBy: 'n' });
    turn('src', 't1', 'one');
    const other = add('other', LogEventType.sessionCreated, undefined, { createdBy: 'n' });
    await expect(forker.fork('t', 'src', { atSeq: other })).rejects.toMatchObject({ code: 'invalid_input' });
    await expect(forker.fork('t', 'nobody', {})).rejects.toMatchObject({ code: 'not_found' });
    await expect(forker.fork('t', 'gone', {})).rejects.toMatchObject({ code: 'session_deleted' });
    await expect(forker.fork('t', 'src', { sessionId: 'other' })).rejects.toMatchObject({ code: 'conflict' });
    await expect(forker.fork('t', 'src', { sessionId: 'burnt' })).rejects.toMatchObject({ code: 'conflict' });
    await expect(forker.fork('t', 'src', { sessionId: 'src' })).rejects.toMatchObject({ code: 'invalid_input' });
  });
});

describe('decodeFork', () => {
  const codec = createCodec();
  it('takes an empty body, {}, JSON and msgpack, and refuses unknown fields and bad values', () => {
    expect(decodeFork(codec, new Uint8Array())).toEqual({});
    expect(decodeFork(codec, new TextEncoder().encode('{"atSeq":7,"sessionId":"b-1"}'), 'application/json')).toEqual({ atSeq: 7, sessionId: 'b-1' });
    expect(decodeFork(codec, codec.encode({ atSeq: 3 }))).toEqual({ atSeq: 3 });
    expect(() => decodeFork(codec, codec.encode({ at: 3 }))).toThrow(/invalid/i);
    expect(() => decodeFork(codec, codec.encode({ atSeq: 0 }))).toThrow();
    expect(() => decodeFork(codec, codec.encode({ sessionId: 'no spaces' }))).toThrow();
  });
});
