import { beforeAll, describe, expect, it } from 'vitest';
import { jetstream, jetstreamManager } from '@nats-io/jetstream';
import { createReplyMux } from '../../src/bus/reply-mux.ts';
import type { ReplyMux } from '../../src/bus/reply-mux.ts';
import { createSessionLog } from '../../src/bus/session-log.ts';
import type { SessionLog } from '../../src/bus/session-log.ts';
import { ensureStreams } from '../../src/bus/streams.ts';
import { LogConflictError, TimeoutError } from '../../src/errors.ts';
import { LogEventType, createCodec, createEnvelopeFactory, createSubjects } from '../../src/protocol/index.ts';
import { createSessionWriter } from '../../services/runtime/sessions/session-writer.ts';
import { createTranscript } from '../../services/runtime/sessions/transcript.ts';
import { useNatsServer } from '../helpers/nats-fixture.ts';

// An append whose acknowledgement is lost although JetStream stored the event, in the middle of a pipelined group:
// the design (docs/architecture.md, *Known limits*) has the writer take it, at its next append, for another writer's
// event, so the session is given up and opened again from its log, which holds every event once.
const nats = useNatsServer();
const codec = createCodec();
let counter = 0;
const envelopes = createEnvelopeFactory({ newId: () => `lost-${++counter}`, now: () => 1000 });

/** A reply mux that loses the reply of the `nth` route made after `loseNth` (0 for the next one): a lost ack. */
function losingMux(mux: ReplyMux): ReplyMux & { loseNth(nth: number): void } {
  let lose: number | undefined;
  return {
    loseNth(nth) {
      lose = nth;
    },
    route(handler) {
      if (lose === undefined) return mux.route(handler);
      const losing = lose === 0;
      lose = losing ? undefined : lose - 1;
      return mux.route(losing ? () => undefined : handler);
    },
  };
}

let reader: SessionLog;
let lossy: SessionLog;
let replies: ReturnType<typeof losingMux>;

beforeAll(async () => {
  const names = await ensureStreams(await jetstreamManager(nats.nc), { prefix: 'agentbus' });
  const common = { nc: nats.nc, js: jetstream(nats.nc), subjects: createSubjects(), codec, stream: names.log };
  reader = createSessionLog(common);
  replies = losingMux(createReplyMux(nats.nc));
  // Long enough for an ack on a loaded machine; a lost one is waited for this long.
  lossy = createSessionLog({ ...common, replies, requestTimeoutMs: 1_000 });
});

/** A writer of the session over `log`, from the log as it is now, as a node that opens the session makes it. */
async function openWriter(sessionId: string, log: SessionLog) {
  const read = await reader.read('acme', sessionId);
  const transcript = createTranscript();
  for (const event of read.events) transcript.add(event);
  const writer = createSessionWriter({ tenant: 'acme', sessionId, log, envelopes, transcript, readSeq: read.lastSeq });
  const say = (text: string) => writer.append(LogEventType.userMessage, { turnId: 'turn-1' }, { text });
  return { writer, transcript, say };
}

async function logged(sessionId: string): Promise<{ texts: Array<string | false>; ids: string[] }> {
  const { events } = await reader.read('acme', sessionId);
  return { texts: events.map((event) => event.type === 'user.message' && event.data.text), ids: events.map((event) => event.id) };
}

const texts = (transcript: ReturnType<typeof createTranscript>) => transcript.events.map((event) => event.type === 'user.message' && event.data.text);

describe('an append acknowledgement lost in a pipelined group, the event stored', () => {
  for (const [lost, name] of [
    [0, 'first'],
    [1, 'middle'],
    [2, 'last'],
  ] as const) {
    it(`(the ${name} of three) loses no event, duplicates none, and gives the session up at its next append`, async () => {
      const sessionId = `lost-${name}`;
      const { say, transcript } = await openWriter(sessionId, lossy);
      await say('before');
      replies.loseNth(lost);
      const results = await Promise.allSettled([say('a'), say('b'), say('c')]);
      // Every event went out and was stored once, in order (the later ones chained to the one before).
      const stored = await logged(sessionId);
      expect(stored.texts).toEqual(['before', 'a', 'b', 'c']);
      expect(new Set(stored.ids).size).toBe(4);
      // The events before the lost ack are taken; it and the ones after it fail, though stored: the writer does not
      // know where the log stands past the lost one, so it takes none of them into the transcript.
      expect(results.map((result) => result.status)).toEqual(['a', 'b', 'c'].map((_, index) => (index < lost ? 'fulfilled' : 'rejected')));
      for (const result of results.slice(lost)) expect((result as PromiseRejectedResult).reason).toBeInstanceOf(TimeoutError);
      expect(texts(transcript)).toEqual(['before', 'a', 'b', 'c'].slice(0, 1 + lost));
      // The next append expects the transcript's last sequence: refused, and what is past it is this session's
      // events, so the writer gives the session up (LogConflictError) and stores nothing.
      await expect(say('after')).rejects.toBeInstanceOf(LogConflictError);
      expect((await logged(sessionId)).texts).toEqual(['before', 'a', 'b', 'c']);
      // Opened again from the log, as the node that adopts the given-up session does: everything is there, once.
      const reopened = await openWriter(sessionId, lossy);
      expect(texts(reopened.transcript)).toEqual(['before', 'a', 'b', 'c']);
      await reopened.say('after');
      const final = await logged(sessionId);
      expect(final.texts).toEqual(['before', 'a', 'b', 'c', 'after']);
      expect(new Set(final.ids).size).toBe(5);
    });
  }

  it('an exclusive job whose single append lost its ack is given up the same way, and the log holds the event once', async () => {
    const sessionId = 'lost-single';
    const { writer, transcript, say } = await openWriter(sessionId, lossy);
    await say('before');
    replies.loseNth(0);
    await expect(writer.exclusive((append) => append(LogEventType.userMessage, { turnId: 'turn-1' }, { text: 'alone' }))).rejects.toBeInstanceOf(TimeoutError);
    expect(texts(transcript)).toEqual(['before']);
    await expect(say('after')).rejects.toBeInstanceOf(LogConflictError);
    expect((await logged(sessionId)).texts).toEqual(['before', 'alone']);
  });
});
