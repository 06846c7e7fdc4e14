import { beforeAll, describe, expect, it } from 'vitest';
import { jetstream, jetstreamManager } from '@nats-io/jetstream';
import { createSessionLog } from '../../src/bus/session-log.ts';
import type { SessionLog } from '../../src/bus/session-log.ts';
import { ensureStreams } from '../../src/bus/streams.ts';
import { LogConflictError } from '../../src/errors.ts';
import { createCodec, createEnvelopeFactory, createSubjects } from '../../src/protocol/index.ts';
import type { LogEvent } from '../../src/protocol/index.ts';
import { headers } from '@nats-io/nats-core';
import { createLogger } from '../../src/logging.ts';
import { useNatsServer } from '../helpers/nats-fixture.ts';

const nats = useNatsServer();
let log: SessionLog;
const codec = createCodec();
/** What the log reported at warn, parsed. */
const warnings: Array<Record<string, unknown>> = [];
const logger = createLogger({ name: 'test', level: 'warn', destination: { write: (line: string) => void warnings.push(JSON.parse(line) as Record<string, unknown>) } });
let counter = 0;
const envelopes = createEnvelopeFactory({ newId: () => `id-${++counter}`, now: () => 1000 });

function userMessage(sessionId: string, text: string): LogEvent {
  return envelopes.create('user.message', { tenant: 'acme', sessionId, turnId: 't1' }, { text }) as LogEvent;
}

beforeAll(async () => {
  const jsm = await jetstreamManager(nats.nc);
  const names = await ensureStreams(jsm, { prefix: 'agentbus' });
  await ensureStreams(jsm, { prefix: 'agentbus' });
  log = createSessionLog({ nc: nats.nc, js: jetstream(nats.nc), subjects: createSubjects(), codec, stream: names.log, logger });
});

/** Publishes raw bytes on a log subject with core NATS, as anyone may on a server without permissions; the stream's sequence. */
async function publishRaw(subject: string, body: Uint8Array | string, contentType?: string): Promise<number> {
  const requestHeaders = headers();
  if (contentType) requestHeaders.set('Content-Type', contentType);
  const reply = await nats.nc.request(subject, body, { timeout: 5000, headers: requestHeaders });
  return (codec.decode(reply.data) as { seq: number }).seq;
}

describe('session log', () => {
  it('reads back appended events in order with their sequences', async () => {
    const first = await log.append(userMessage('s1', 'one'), 0);
    const second = await log.append(userMessage('s1', 'two'), first);
    await log.append(userMessage('other', 'not mine'), 0);
    const { events, lastSeq } = await log.read('acme', 's1');
    expect(events.map((event) => event.type === 'user.message' && event.data.text)).toEqual(['one', 'two']);
    expect(events.map((event) => event.seq)).toEqual([first, second]);
    expect(lastSeq).toBe(second);
    expect(await log.lastSeq('acme', 's1')).toBe(second);
  });

  it('refuses an append from a writer that has fallen behind', async () => {
    const first = await log.append(userMessage('s2', 'one'), 0);
    await log.append(userMessage('s2', 'two'), first);
    await expect(log.append(userMessage('s2', 'stale'), first)).rejects.toBeInstanceOf(LogConflictError);
    await expect(log.append(userMessage('s2', 'not first'), 0)).rejects.toBeInstanceOf(LogConflictError);
  });

  it('deduplicates a retried append by event id', async () => {
    const event = userMessage('s3', 'once');
    const seq = await log.append(event, 0);
    const again = await log.append(event, 0);
    expect(again).toBe(seq);
    expect((await log.read('acme', 's3')).events).toHaveLength(1);
  });

  it('says so when no stream takes the append', async () => {
    const elsewhere = createSessionLog({ nc: nats.nc, js: jetstream(nats.nc), subjects: createSubjects('nostream'), codec: createCodec(), stream: 'AGENTBUS_LOG' });
    await expect(elsewhere.append(userMessage('s4', 'lost'), 0)).rejects.toMatchObject({ code: 'no_responders', retryable: true });
  });

  it('pipelines a group: the first append carries the expected sequence, all are acknowledged in order', async () => {
    const first = await log.append(userMessage('s5', 'one'), 0);
    const stored: Array<[number, number]> = [];
    await log.appendGroup([userMessage('s5', 'two'), userMessage('s5', 'three'), userMessage('s5', 'four')], first, (index, seq) => stored.push([index, seq]));
    expect(stored.map(([index]) => index)).toEqual([0, 1, 2]);
    expect(stored.map(([, seq]) => seq)).toEqual([...stored.map(([, seq]) => seq)].sort((a, b) => a - b));
    const stale = log.appendGroup([userMessage('s5', 'stale')], first, () => undefined);
    await expect(stale).rejects.toBeInstanceOf(LogConflictError);
    expect((await log.read('acme', 's5')).events.map((event) => event.type === 'user.message' && event.data.text)).toEqual(['one', 'two', 'three', 'four']);
  });

  it('skips and reports messages on the log subject that are not valid events of the session, keeping the good ones in order', async () => {
    const subject = 'agentbus.acme.sessions.s6.log';
    const first = await log.append(userMessage('s6', 'one'), 0);
    const junk = await publishRaw(subject, new Uint8Array([0x82, 0xa1, 0x61]));
    const malformed = await publishRaw(subject, codec.encode({ v: 1, id: 'bad-1', type: 'tool.result', tenant: 'acme', sessionId: 's6', ts: 1, data: 5 }));
    const notAnEvent = await publishRaw(subject, JSON.stringify({ hello: 'world' }), 'application/json');
    const second = await log.append(userMessage('s6', 'two'), notAnEvent);
    const elsewhere = await publishRaw(subject, codec.encode(userMessage('other', 'not this session')));
    const text = await publishRaw(subject, 'just text');
    warnings.length = 0;

    const { events, lastSeq } = await log.read('acme', 's6');
    expect(events.map((event) => event.type === 'user.message' && event.data.text)).toEqual(['one', 'two']);
    expect(events.map((event) => event.seq)).toEqual([first, second]);
    // The next append must expect the last message, skipped or not.
    expect(lastSeq).toBe(text);
    expect(warnings.map((line) => line.seq)).toEqual([junk, malformed, notAnEvent, elsewhere, text]);
    for (const line of warnings) expect(line).toMatchObject({ level: 40, msg: 'skipped an invalid message in a session log', tenant: 'acme', sessionId: 's6', subject });
    expect(warnings.map((line) => (line.err as { message: string }).message)).toEqual([
      expect.stringMatching(/^malformed msgpack/),
      'invalid log event: data: Invalid input: expected object, received number',
      expect.stringMatching(/^invalid log event: type: Invalid discriminator value/),
      'invalid log event: an event of acme/other on the log of acme/s6',
      'invalid log event: Invalid input: expected object, received string',
    ]);
    await expect(log.append(userMessage('s6', 'three'), lastSeq)).resolves.toBeGreaterThan(text);
  });

  it('reads only what was stored after a sequence, skipping and reporting what is not a valid event', async () => {
    const subject = 'agentbus.acme.sessions.after-1.log';
    const first = await log.append(userMessage('after-1', 'one'), 0);
    expect(await log.read('acme', 'after-1', { after: first })).toEqual({ events: [], lastSeq: first, more: false });
    const junk = await publishRaw(subject, 'just text');
    const second = await log.append(userMessage('after-1', 'two'), junk);
    const elsewhere = await publishRaw(subject, codec.encode(userMessage('other', 'not this session')));
    warnings.length = 0;

    const { events, lastSeq } = await log.read('acme', 'after-1', { after: first });
    expect(events.map((event) => [event.seq, event.type === 'user.message' && event.data.text])).toEqual([[second, 'two']]);
    expect(lastSeq).toBe(elsewhere);
    expect(warnings.map((line) => line.seq)).toEqual([junk, elsewhere]);
    expect(await log.read('acme', 'after-1', { after: second })).toEqual({ events: [], lastSeq: elsewhere, more: false });
  });

  it('reads a log that holds only invalid messages as no events, through their last sequence', async () => {
    const junk = await publishRaw('agentbus.acme.sessions.s7.log', codec.encode([1, 2, 3]));
    expect(await log.read('acme', 's7')).toEqual({ events: [], lastSeq: junk, more: false });
  });

  it('finds the last sequence of a session by a direct get, 0 for none', async () => {
    expect(await log.lastSeq('acme', 'never-written')).toBe(0);
    const first = await log.append(userMessage('direct-1', 'one'), 0);
    await log.append(userMessage('direct-2', 'not mine'), 0);
    expect(await log.lastSeq('acme', 'direct-1')).toBe(first);
    // JetStream's API takes every `$JS.API.>` request: a direct get on a stream that does not exist goes unanswered.
    const missing = createSessionLog({ nc: nats.nc, js: jetstream(nats.nc), subjects: createSubjects(), codec: createCodec(), stream: 'NO_SUCH_STREAM', requestTimeoutMs: 300 });
    await expect(missing.lastSeq('acme', 'direct-1')).rejects.toMatchObject({ code: 'timeout' });
  });

  it('reads an empty session as no events', async () => {
    expect(await log.read('acme', 'nobody')).toEqual({ events: [], lastSeq: 0, more: false });
  });

  it('ends a read whose signal fired before its consumer started, though the log never reaches the sequence it waits for', async () => {
    await log.append(userMessage('aborted-early', 'one'), 0);
    const cancelled = new AbortController();
    cancelled.abort(new Error('cancelled before the read'));
    // `last` past what is stored: without the early stop the read would wait for that message for good.
    await expect(log.read('acme', 'aborted-early', { last: Promise.resolve(100), signal: cancelled.signal })).rejects.toThrow('cancelled before the read');
    await expect(log.read('acme', 'aborted-early', { last: Promise.resolve(100), timeoutMs: 1 })).rejects.toThrow('took over 1 ms');
  }, 10_000);
});

/** The texts of a session's user messages, as read back. */
async function texts(sessionId: string): Promise<Array<string | false>> {
  return (await log.read('acme', sessionId)).events.map((event) => event.type === 'user.message' && event.data.text);
}

/**
 * A session log over a connection that calls `beforePublish` before each message it publishes: what the test stores
 * there (with the real connection) is taken by the server before that message, as if another publisher came first.
 */
function logWithHook(beforePublish: (subject: string) => void): SessionLog {
  const nc = nats.nc;
  const hooked = new Proxy(nc, {
    get(target, key) {
      if (key === 'publish') {
        return (...args: Parameters<typeof nc.publish>) => {
          beforePublish(args[0]);
          target.publish(...args);
        };
      }
      const value: unknown = Reflect.get(target, key);
      return typeof value === 'function' ? (value as (...values: unknown[]) => unknown).bind(target) : value;
    },
  });
  return createSessionLog({ nc: hooked, js: jetstream(nc), subjects: createSubjects(), codec, stream: 'AGENTBUS_LOG' });
}

describe('session log, a pipelined group from a writer that lost the session', () => {
  it('stores none of the group when its first event is refused: nothing of the old writer lands behind the new one', async () => {
    const first = await log.append(userMessage('g1', 'one'), 0);
    // The new holder read the log through `first` and appended; the old one, paused meanwhile, still expects `first`.
    const taken = await log.append(userMessage('g1', 'new holder'), first);
    const stored: number[] = [];
    const ghosts = [userMessage('g1', 'ghost 1'), userMessage('g1', 'ghost 2'), userMessage('g1', 'ghost 3')];
    await expect(log.appendGroup(ghosts, first, (index) => stored.push(index))).rejects.toBeInstanceOf(LogConflictError);
    expect(stored).toEqual([]);
    expect(await texts('g1')).toEqual(['one', 'new holder']);
    // The new holder goes on as if the old writer had never tried.
    await expect(log.append(userMessage('g1', 'two'), taken)).resolves.toBeGreaterThan(taken);
  });

  it('stores nothing after an event of the group that was refused for what it is (too large): the log has no hole', async () => {
    const names = await ensureStreams(await jetstreamManager(nats.nc), { prefix: 'small', limits: { maxEventBytes: 4096 } });
    const small = createSessionLog({ nc: nats.nc, js: jetstream(nats.nc), subjects: createSubjects('small'), codec, stream: names.log });
    const first = await small.append(userMessage('g2', 'one'), 0);
    const stored: number[] = [];
    const group = [userMessage('g2', 'two'), userMessage('g2', 'x'.repeat(8192)), userMessage('g2', 'four')];
    await expect(small.appendGroup(group, first, (index) => stored.push(index))).rejects.toMatchObject({ code: 'payload_too_large' });
    expect(stored).toEqual([0]);
    const { events } = await small.read('acme', 'g2');
    expect(events.map((event) => event.type === 'user.message' && event.data.text)).toEqual(['one', 'two']);
  });

  it('sends the rest again, fenced, when another session appended between two events of the group: all stored, in order', async () => {
    const first = await log.append(userMessage('g3', 'one'), 0);
    const subject = 'agentbus.acme.sessions.g3.log';
    let published = 0;
    const hooked = logWithHook((target) => {
      if (target !== subject) return;
      published += 1;
      // Another session's append reaches the stream between the group's first and second event.
      if (published === 2) nats.nc.publish('agentbus.acme.sessions.g3-other.log', codec.encode(userMessage('g3-other', 'between')));
    });
    const stored: Array<[number, number, string | undefined]> = [];
    const group = [userMessage('g3', 'a'), userMessage('g3', 'b'), userMessage('g3', 'c')];
    await hooked.appendGroup(group, first, (index, seq, event) => stored.push([index, seq, event?.id]));
    expect(stored.map(([index]) => index)).toEqual([0, 1, 2]);
    // b and c were refused once: they went out again under new ids, which `onStored` hands back.
    expect(stored[0]![2]).toBe(group[0]!.id);
    expect(stored.slice(1).map(([, , id]) => group.some((event) => event.id === id))).toEqual([false, false]);
    expect((await log.read('acme', 'g3')).events.slice(1).map((event) => event.id)).toEqual(stored.map(([, , id]) => id));
    const between = await log.lastSeq('acme', 'g3-other');
    // a, the other session's event, then b and c sent again behind it (three sends, then two).
    expect(stored.map(([, seq]) => seq)).toEqual([between - 1, between + 1, between + 2]);
    expect(published).toBe(5);
    expect(await texts('g3')).toEqual(['one', 'a', 'b', 'c']);
  });

  it('refuses the rest when the writer that came between two events of the group is another writer of the session', async () => {
    const first = await log.append(userMessage('g4', 'one'), 0);
    const subject = 'agentbus.acme.sessions.g4.log';
    let published = 0;
    let intruder: LogEvent | undefined;
    const hooked = logWithHook((target) => {
      if (target !== subject) return;
      published += 1;
      if (published === 2) {
        intruder = userMessage('g4', 'other writer');
        nats.nc.publish(subject, codec.encode(intruder));
      }
    });
    const stored: number[] = [];
    await expect(hooked.appendGroup([userMessage('g4', 'a'), userMessage('g4', 'b'), userMessage('g4', 'c')], first, (index) => stored.push(index))).rejects.toBeInstanceOf(
      LogConflictError,
    );
    expect(stored).toEqual([0]);
    expect(intruder).toBeDefined();
    expect(await texts('g4')).toEqual(['one', 'a', 'other writer']);
  });
});
