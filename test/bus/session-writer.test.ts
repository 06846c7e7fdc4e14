import { beforeAll, describe, expect, it } from 'vitest';
import { jetstream, jetstreamManager } from '@nats-io/jetstream';
import { createSessionLog } from '../../src/bus/session-log.ts';
import type { SessionLog } from '../../src/bus/session-log.ts';
import { ensureStreams } from '../../src/bus/streams.ts';
import { LogConflictError } from '../../src/errors.ts';
import { LogEventType, createCodec, createEnvelopeFactory, createSubjects } from '../../src/protocol/index.ts';
import { createSessionWriter } from '../../services/runtime/sessions/session-writer.ts';
import { createTranscript } from '../../services/runtime/sessions/transcript.ts';
import { useNatsServer } from '../helpers/nats-fixture.ts';

const nats = useNatsServer();
const codec = createCodec();
let log: SessionLog;
let counter = 0;
const envelopes = createEnvelopeFactory({ newId: () => `w-${++counter}`, now: () => 1000 });

beforeAll(async () => {
  const names = await ensureStreams(await jetstreamManager(nats.nc), { prefix: 'agentbus' });
  log = createSessionLog({ nc: nats.nc, js: jetstream(nats.nc), subjects: createSubjects(), codec, stream: names.log });
});

/** A writer of the session that starts from the log as it is now, as a node that opens the session does. */
async function openWriter(sessionId: string) {
  const read = await log.read('acme', sessionId);
  const transcript = createTranscript();
  for (const event of read.events) transcript.add(event);
  const writer = createSessionWriter({ tenant: 'acme', sessionId, log, envelopes, transcript, readSeq: read.lastSeq });
  const say = (text: string) => writer.append(LogEventType.userMessage, { turnId: 'turn-1' }, { text });
  return { writer, transcript, say };
}

async function texts(sessionId: string): Promise<Array<string | false>> {
  return (await log.read('acme', sessionId)).events.map((event) => event.type === 'user.message' && event.data.text);
}

describe('session writer on a real log', () => {
  it('writes appends asked together past junk on the log subject, whole and in order', async () => {
    const { say, transcript } = await openWriter('w1');
    await say('one');
    // Anyone who may publish on the log subject can store junk there.
    nats.nc.publish('agentbus.acme.sessions.w1.log', new TextEncoder().encode('junk'));
    await nats.nc.flush();
    const stored = await Promise.all([say('a'), say('b'), say('c')]);
    expect(await texts('w1')).toEqual(['one', 'a', 'b', 'c']);
    expect(stored.map((event) => event.seq)).toEqual(transcript.events.slice(1).map((event) => event.seq));
  });

  it('a writer that lost the session to another lands nothing behind the new writer, and the new one goes on', async () => {
    const stale = await openWriter('w2');
    await stale.say('one');
    // Another node takes the session (the stale one paused past its lease) and appends.
    const holder = await openWriter('w2');
    await holder.say('new holder');
    const results = await Promise.allSettled([stale.say('ghost 1'), stale.say('ghost 2'), stale.say('ghost 3')]);
    expect(results.map((result) => result.status === 'rejected' && result.reason instanceof LogConflictError)).toEqual([true, true, true]);
    await expect(holder.say('two')).resolves.toMatchObject({ data: { text: 'two' } });
    expect(await texts('w2')).toEqual(['one', 'new holder', 'two']);
  });
});
