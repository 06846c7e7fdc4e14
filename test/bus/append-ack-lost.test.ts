import { beforeAll, describe, expect, it } from 'vitest';
import { jetstream, jetstreamManager } from '@nats-io/jetstream';
import { createReplyMux } from '../../src/bus/reply-mux.ts';
import type { ReplyMux } from '../../src/bus/reply-mux.ts';
import { createSessionLog } from '../../src/bus/session-log.ts';
import type { SessionLog } from '../../src/bus/session-log.ts';
import { ensureStreams } from '../../src/bus/streams.ts';
import { LogConflictError, TimeoutError } from '../../src/errors.ts';
import { LogEventType, createCodec, createEnvelopeFactory, createSubjects } from '../../src/protocol/index.ts';
import { openSession } from '../../services/runtime/sessions/session-host.ts';
import { createSessionWriter } from '../../services/runtime/sessions/session-writer.ts';
import { createTranscript } from '../../services/runtime/sessions/transcript.ts';
import { useNatsServer } from '../helpers/nats-fixture.ts';
import { sessionHostDeps } from '../helpers/session-host-deps.ts';

// An append whose acknowledgement is lost although JetStream stored the event (alone, or anywhere in a pipelined
// group): the writer reads what the log holds past the last sequence it knows and, finding its own events there in
// order, takes them as acknowledged and goes on (docs/architecture.md, *An acknowledgement lost*). Another writer's
// event there means the session was taken over: the writer gives it up. A log it cannot read in time leaves it as
// before.
const nats = useNatsServer();
const codec = createCodec();
let counter = 0;
const envelopes = createEnvelopeFactory({ newId: () => `lost-${++counter}`, now: () => 1000 });

/** A reply mux that loses the replies of the routes made `nths` after `lose` is called (0 for the next one): lost acks. */
function losingMux(mux: ReplyMux): ReplyMux & { lose(...nths: number[]): void; pending(): number } {
  let losing: Set<number> | undefined;
  let made = 0;
  return {
    lose(...nths) {
      losing = new Set(nths);
      made = 0;
    },
    pending: () => losing?.size ?? 0,
    route(handler) {
      if (!losing) return mux.route(handler);
      const lost = losing.has(made);
      losing.delete(made);
      made += 1;
      if (losing.size === 0) losing = undefined;
      return mux.route(lost ? () => undefined : handler);
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
async function openWriter(sessionId: string, log: SessionLog = lossy) {
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

/** Every event of the session is in the log once, with these texts in order. */
async function expectLogged(sessionId: string, expected: string[]): Promise<void> {
  const stored = await logged(sessionId);
  expect(stored.texts).toEqual(expected);
  expect(new Set(stored.ids).size).toBe(expected.length);
}

describe('an append acknowledgement lost, the event stored', () => {
  for (const [lost, name] of [
    [0, 'first'],
    [1, 'middle'],
    [2, 'last'],
  ] as const) {
    it(`(the ${name} of a group of three) is recovered from the log: every append resolves with its sequence, and the writer goes on`, async () => {
      const sessionId = `lost-${name}`;
      const { say, transcript } = await openWriter(sessionId);
      await say('before');
      replies.lose(lost);
      const results = await Promise.all([say('a'), say('b'), say('c')]);
      await expectLogged(sessionId, ['before', 'a', 'b', 'c']);
      // Each resolves with the sequence the log has it at, and the transcript holds them all, in order.
      const { events } = await reader.read('acme', sessionId);
      expect(results.map((event) => [event.id, event.seq])).toEqual(events.slice(1).map((event) => [event.id, event.seq]));
      expect(texts(transcript)).toEqual(['before', 'a', 'b', 'c']);
      expect(transcript.lastSeq).toBe(events[3]!.seq);
      // The next append expects the right sequence: stored, no conflict.
      await say('after');
      await expectLogged(sessionId, ['before', 'a', 'b', 'c', 'after']);
    });
  }

  it('(a single append) is recovered the same way, and so is an exclusive job\'s', async () => {
    const sessionId = 'lost-single';
    const { writer, transcript, say } = await openWriter(sessionId);
    await say('before');
    replies.lose(0);
    expect((await say('alone')).seq).toBeGreaterThan(0);
    replies.lose(0);
    const job = await writer.exclusive((append) => append(LogEventType.userMessage, { turnId: 'turn-1' }, { text: 'job' }));
    expect(job.seq).toBe(transcript.lastSeq);
    await say('after');
    expect(texts(transcript)).toEqual(['before', 'alone', 'job', 'after']);
    await expectLogged(sessionId, ['before', 'alone', 'job', 'after']);
  });

  it('(a required append, the first of a session) is recovered: later appends are written', async () => {
    const sessionId = 'lost-required';
    const { writer, say } = await openWriter(sessionId);
    replies.lose(0);
    await writer.appendRequired(LogEventType.userMessage, { turnId: 'turn-1' }, { text: 'required' });
    await say('after');
    await expectLogged(sessionId, ['required', 'after']);
  });

  it('with the log not readable in time either, rejects as before: the session is given up at the next append', async () => {
    const sessionId = 'lost-unreadable';
    const { say, transcript } = await openWriter(sessionId);
    await say('before');
    // The ack, then the direct get of the log's last sequence that the lookup makes.
    replies.lose(0, 1);
    await expect(say('unknown')).rejects.toBeInstanceOf(TimeoutError);
    // The writer looked (and heard nothing): both replies were lost.
    expect(replies.pending()).toBe(0);
    expect(texts(transcript)).toEqual(['before']);
    await expect(say('after')).rejects.toBeInstanceOf(LogConflictError);
    await expectLogged(sessionId, ['before', 'unknown']);
    const reopened = await openWriter(sessionId);
    await reopened.say('after');
    await expectLogged(sessionId, ['before', 'unknown', 'after']);
  });
});

describe('an append acknowledgement lost while another writer took the session over', () => {
  /** `log`, whose read of what is past a sequence (the lookup after a lost ack) first runs `before`, once. */
  function readingAfter(log: SessionLog, before: () => Promise<void>): SessionLog {
    let pending: (() => Promise<void>) | undefined = before;
    return {
      ...log,
      async read(tenant, sessionId, options = {}) {
        const run = options.after !== undefined ? pending : undefined;
        pending = undefined;
        if (run) await run();
        return log.read(tenant, sessionId, options);
      },
    };
  }

  it('its event stored, another writer\'s after it: the append rejects with LogConflictError and the stale writer writes nothing more', async () => {
    const sessionId = 'lost-then-taken';
    // The other writer opens the session from the log (with the stale one's event in it) and appends.
    const log = readingAfter(lossy, async () => {
      const other = await openWriter(sessionId, reader);
      await other.say('taken');
    });
    const stale = await openWriter(sessionId, log);
    await stale.say('before');
    replies.lose(0);
    await expect(stale.say('lost')).rejects.toBeInstanceOf(LogConflictError);
    expect(texts(stale.transcript)).toEqual(['before']);
    await expect(stale.say('after')).rejects.toBeInstanceOf(LogConflictError);
    await expectLogged(sessionId, ['before', 'lost', 'taken']);
  });

  it('its group refused behind another writer\'s event, the refusal lost: rejects with LogConflictError, nothing of it stored', async () => {
    const sessionId = 'taken-then-lost';
    const stale = await openWriter(sessionId);
    await stale.say('before');
    const other = await openWriter(sessionId, reader);
    await other.say('taken');
    replies.lose(0);
    const results = await Promise.allSettled([stale.say('a'), stale.say('b')]);
    for (const result of results) expect((result as PromiseRejectedResult).reason).toBeInstanceOf(LogConflictError);
    await expect(stale.say('after')).rejects.toBeInstanceOf(LogConflictError);
    await expectLogged(sessionId, ['before', 'taken']);
  });
});

describe('a prompt whose acknowledgement was lost, the prompt stored', () => {
  it('is accepted, its turn runs, and the next prompt is accepted too: the log holds each once, in order', async () => {
    const sessionId = 'lost-prompt';
    let turns = 0;
    const host = await openSession(sessionHostDeps({ log: lossy, finish: async () => void (turns += 1) }), 'acme', sessionId);
    // The prompt of a new session goes out with its `session.created`, as a group: the prompt's ack is lost.
    replies.lose(1);
    const first = await host.prompt({ text: 'first' });
    const second = await host.prompt({ text: 'second' });
    expect(first.turnId).not.toBe(second.turnId);
    await expect.poll(() => turns, { timeout: 5_000 }).toBe(2);
    const { events } = await reader.read('acme', sessionId);
    expect(events.map((event) => (event.type === 'user.message' ? [event.data.text, event.turnId] : [event.type]))).toEqual([
      ['session.created'],
      ['first', first.turnId],
      ['second', second.turnId],
    ]);
    host.stop();
  });
});
