import { beforeAll, describe, expect, it } from 'vitest';
import { jetstream, jetstreamManager } from '@nats-io/jetstream';
import { createSessionLog } from '../src/bus/session-log.ts';
import type { SessionLog } from '../src/bus/session-log.ts';
import { ensureStreams } from '../src/bus/streams.ts';
import { LogConflictError } from '../src/errors.ts';
import { createCodec, createEnvelopeFactory, createSubjects } from '../src/protocol/index.ts';
import type { LogEvent } from '../src/protocol/index.ts';
import { useNatsServer } from './helpers/nats-fixture.ts';

const nats = useNatsServer();
let log: SessionLog;
let counter = 0;
const envelopes = createEnvelopeFactory({ newId: () => `id-${++counter}`, now: () => 1000 });

function userMessage(sessionId: string, text: string): LogEvent {
  return envelopes.create('user.message', { tenant: 'acme', sessionId, turnId: 't1' }, { text }) as LogEvent;
}

beforeAll(async () => {
  const jsm = await jetstreamManager(nats.nc);
  const names = await ensureStreams(jsm, { prefix: 'agentbus' });
  await ensureStreams(jsm, { prefix: 'agentbus' });
  log = createSessionLog({ nc: nats.nc, js: jetstream(nats.nc), jsm, subjects: createSubjects(), codec: createCodec(), stream: names.log });
});

describe('session log', () => {
  it('reads back appended events in order with their sequences', async () => {
    const first = await log.append(userMessage('s1', 'one'), 0);
    const second = await log.append(userMessage('s1', 'two'), first);
    await log.append(userMessage('other', 'not mine'), 0);
    const events = await log.read('acme', 's1');
    expect(events.map((event) => event.type === 'user.message' && event.data.text)).toEqual(['one', 'two']);
    expect(events.map((event) => event.seq)).toEqual([first, second]);
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
    expect(await log.read('acme', 's3')).toHaveLength(1);
  });

  it('says so when no stream takes the append', async () => {
    const jsm = await jetstreamManager(nats.nc);
    const elsewhere = createSessionLog({ nc: nats.nc, js: jetstream(nats.nc), jsm, subjects: createSubjects('nostream'), codec: createCodec(), stream: 'AGENTBUS_LOG' });
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
    expect((await log.read('acme', 's5')).map((event) => event.type === 'user.message' && event.data.text)).toEqual(['one', 'two', 'three', 'four']);
  });

  it('reads an empty session as no events', async () => {
    expect(await log.read('acme', 'nobody')).toEqual([]);
  });
});
