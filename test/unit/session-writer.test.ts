import { describe, expect, it } from 'vitest';
import type { SessionLog, SessionLogRead } from '../../src/bus/session-log.ts';
import { LogConflictError, TimeoutError } from '../../src/errors.ts';
import { LogEventType, createEnvelopeFactory } from '../../src/protocol/index.ts';
import type { LogEvent } from '../../src/protocol/index.ts';
import { MAX_JUNK_RETRIES, createSessionWriter } from '../../services/runtime/sessions/session-writer.ts';
import { createTranscript } from '../../services/runtime/sessions/transcript.ts';

/**
 * A session log in memory whose subject also holds messages the test stores as anyone could: junk (not a
 * valid event: the real log skips it on read) or a valid event of the session (another writer's). Appends
 * check the expected sequence as JetStream does; `read` reports what each call was asked for.
 */
function fakeLog() {
  type Stored = { seq: number; event?: LogEvent };
  const stored: Stored[] = [];
  let seq = 0;
  const appends: Array<{ ids: string[]; expectedSeq: number }> = [];
  const reads: number[] = [];
  let beforeNext: ((index: number) => void) | undefined;
  const last = () => stored.at(-1)?.seq ?? 0;
  const publish = (event: LogEvent, expectedSeq: number | undefined): number => {
    if (expectedSeq !== undefined && expectedSeq !== last()) throw new LogConflictError(event.sessionId, expectedSeq);
    stored.push({ seq: ++seq, event });
    return seq;
  };
  const log: SessionLog = {
    async append(event, expectedSeq) {
      appends.push({ ids: [event.id], expectedSeq });
      return publish(event, expectedSeq);
    },
    async appendGroup(events, expectedSeq, onStored) {
      appends.push({ ids: events.map((event) => event.id), expectedSeq });
      // As the real log: the first is fenced by the expected sequence, each later one stored only right behind the one
      // before it, so nothing is stored past the first refusal. `beforeNext` may store a message in between, as
      // another publisher could: the real log's fenced resend of the rest then meets it (a refusal past it).
      let last = expectedSeq;
      for (const [index, event] of events.entries()) {
        if (index > 0) beforeNext?.(index);
        last = publish(event, last);
        onStored(index, last, event);
      }
    },
    async read(_tenant, _sessionId, options = {}): Promise<SessionLogRead> {
      const after = options.after ?? 0;
      reads.push(after);
      const past = stored.filter((message) => message.seq > after);
      return {
        events: past.flatMap((message) => (message.event ? [{ ...message.event, seq: message.seq }] : [])),
        lastSeq: past.at(-1)?.seq ?? after,
        more: false,
      };
    },
    lastSeq: async () => last(),
  };
  return {
    log,
    appends,
    reads,
    /** Stores a message that is not a valid event; its sequence. */
    junk: () => (stored.push({ seq: ++seq }), seq),
    /** Stores a valid event of the session written by someone else; its sequence. */
    foreign: (event: LogEvent) => (stored.push({ seq: ++seq, event }), seq),
    /** Calls `hook` before each event of a group but its first is stored. */
    beforeNext: (hook: (index: number) => void) => void (beforeNext = hook),
    /** The valid events in the log, in order. */
    events: () => stored.flatMap((message) => (message.event ? [message.event] : [])),
  };
}

function setup() {
  const fake = fakeLog();
  let id = 0;
  const envelopes = createEnvelopeFactory({ newId: () => `e${++id}`, now: () => 1 });
  const transcript = createTranscript();
  const writer = createSessionWriter({ tenant: 't', sessionId: 's', log: fake.log, envelopes, transcript });
  const prompt = (text: string) => writer.append(LogEventType.userMessage, { turnId: 'turn-1' }, { text });
  const foreignEvent = () => envelopes.create(LogEventType.userMessage, { tenant: 't', sessionId: 's', turnId: 'other' }, { text: 'second writer' }) as LogEvent;
  return { ...fake, writer, transcript, prompt, foreignEvent };
}

describe('session writer, when its append is refused because the log moved', () => {
  it('steps over junk stored on the log subject and appends again, expecting the junk', async () => {
    const log = setup();
    const first = await log.prompt('one');
    const junk = [log.junk(), log.junk()];
    const second = await log.prompt('two');
    expect(second.seq).toBe(junk[1]! + 1);
    expect(log.reads).toEqual([first.seq]);
    expect(log.appends.map((append) => append.expectedSeq)).toEqual([0, first.seq, junk[1]]);
    expect(log.transcript.events.map((event) => event.seq)).toEqual([first.seq, second.seq]);
    // The writer now expects the new event, not the junk.
    expect((await log.prompt('three')).seq).toBe(second.seq! + 1);
  });

  it('does not retry when a valid event of the session is there: another writer holds the log', async () => {
    const log = setup();
    const first = await log.prompt('one');
    log.junk();
    log.foreign(log.foreignEvent());
    await expect(log.prompt('two')).rejects.toBeInstanceOf(LogConflictError);
    expect(log.appends).toHaveLength(2);
    expect(log.transcript.events.map((event) => event.seq)).toEqual([first.seq]);
    // Later appends are refused too: the writer never writes past another writer's event.
    await expect(log.prompt('three')).rejects.toBeInstanceOf(LogConflictError);
    expect(log.events().map((event) => event.type === 'user.message' && event.data.text)).toEqual(['one', 'second writer']);
  });

  it(`gives up after ${MAX_JUNK_RETRIES} retries when junk keeps coming`, async () => {
    const log = setup();
    await log.prompt('one');
    const original = log.log.append;
    // Junk lands before each append: a flood that would keep the writer spinning.
    log.log.append = (event, expectedSeq) => {
      log.junk();
      return original(event, expectedSeq);
    };
    await expect(log.prompt('two')).rejects.toBeInstanceOf(LogConflictError);
    expect(log.appends).toHaveLength(1 + 1 + MAX_JUNK_RETRIES);
    expect(log.reads).toHaveLength(MAX_JUNK_RETRIES);
    // Once the flood stops, the next append goes through past all of it.
    log.log.append = original;
    await expect(log.prompt('three')).resolves.toMatchObject({ data: { text: 'three' } });
  });

  it('appends a group whose first append met junk again past it, whole and in order', async () => {
    const log = setup();
    await log.prompt('one');
    const junk = log.junk();
    const [a, b, c] = await Promise.all([log.prompt('a'), log.prompt('b'), log.prompt('c')]);
    expect([a!.seq, b!.seq, c!.seq]).toEqual([junk + 1, junk + 2, junk + 3]);
    expect(log.events().map((event) => event.type === 'user.message' && event.data.text)).toEqual(['one', 'a', 'b', 'c']);
    expect(log.transcript.events.map((event) => event.seq)).toEqual([1, junk + 1, junk + 2, junk + 3]);
    expect(log.reads).toEqual([1]);
    // Sent again under new ids: a clustered server keeps the ids of messages it refused as in process for a while.
    const [refused, again] = log.appends.slice(1);
    expect(refused).toMatchObject({ expectedSeq: 1 });
    expect(again).toEqual({ ids: [a!.id, b!.id, c!.id], expectedSeq: junk });
    expect(refused!.ids.filter((id) => again!.ids.includes(id))).toEqual([]);
    expect([a, b, c].map((event) => [event!.type, event!.turnId])).toEqual(Array(3).fill(['user.message', 'turn-1']));
  });

  it('appends the rest of a group refused past its stored part again past the junk found there', async () => {
    const log = setup();
    await log.prompt('one');
    let junk = 0;
    log.beforeNext((index) => {
      if (index === 1 && junk === 0) junk = log.junk();
    });
    const [a, b, c] = await Promise.all([log.prompt('a'), log.prompt('b'), log.prompt('c')]);
    expect([a!.seq, b!.seq, c!.seq]).toEqual([2, junk + 1, junk + 2]);
    // The read starts past `a`, stored and in the transcript already: only the junk is there.
    expect(log.reads).toEqual([a!.seq]);
    expect(log.appends.at(-1)).toEqual({ ids: [b!.id, c!.id], expectedSeq: junk });
    expect(log.events().map((event) => event.type === 'user.message' && event.data.text)).toEqual(['one', 'a', 'b', 'c']);
  });

  it('refuses a group whose first append met another writer, storing none of it', async () => {
    const log = setup();
    await log.prompt('one');
    log.foreign(log.foreignEvent());
    const results = await Promise.allSettled([log.prompt('a'), log.prompt('b')]);
    expect(results.map((result) => result.status)).toEqual(['rejected', 'rejected']);
    expect(log.appends).toHaveLength(2);
    expect(log.events().map((event) => event.type === 'user.message' && event.data.text)).toEqual(['one', 'second writer']);
  });

  it('refuses the rest of a group when another writer came between its events, keeping what was stored before', async () => {
    const log = setup();
    await log.prompt('one');
    log.beforeNext((index) => {
      if (index === 1) log.foreign(log.foreignEvent());
    });
    const results = await Promise.allSettled([log.prompt('a'), log.prompt('b'), log.prompt('c')]);
    expect(results.map((result) => result.status)).toEqual(['fulfilled', 'rejected', 'rejected']);
    expect(log.events().map((event) => event.type === 'user.message' && event.data.text)).toEqual(['one', 'a', 'second writer']);
    expect(log.transcript.events.map((event) => event.type === 'user.message' && event.data.text)).toEqual(['one', 'a']);
  });

  it('starts past the messages skipped when the session was read', async () => {
    const fake = fakeLog();
    const junk = fake.junk();
    const writer = createSessionWriter({
      tenant: 't',
      sessionId: 's',
      log: fake.log,
      envelopes: createEnvelopeFactory({ newId: () => 'x', now: () => 1 }),
      transcript: createTranscript(),
      readSeq: junk,
    });
    await expect(writer.append(LogEventType.sessionCreated, {}, { createdBy: 'n' })).resolves.toMatchObject({ seq: junk + 1 });
    expect(fake.reads).toEqual([]);
  });
});

describe('session writer, a required append (turn.started, not waited for)', () => {
  const started = { model: 'scripted:default', maxSteps: 8, deadline: 2, finalAnswer: true };

  it('goes out last in its group: what was asked after it goes out once it is stored, behind it', async () => {
    const log = setup();
    await log.prompt('one');
    const [turnStarted, a, b] = await Promise.all([
      log.writer.appendRequired(LogEventType.turnStarted, { turnId: 'turn-1' }, started),
      log.prompt('a'),
      log.prompt('b'),
    ]);
    expect(log.appends.slice(1).map((append) => append.ids)).toEqual([[turnStarted.id], [a.id, b.id]]);
    expect(log.events().map((event) => event.type)).toEqual(['user.message', 'turn.started', 'user.message', 'user.message']);
  });

  it('when it fails, nothing asked after it is written, exclusive jobs included: they reject with its failure', async () => {
    const log = setup();
    await log.prompt('one');
    const original = log.log.append;
    const lost = new Error('no acknowledgement within 10000 ms');
    log.log.append = async (event, expectedSeq) => {
      if (event.type === LogEventType.turnStarted) throw lost;
      return original(event, expectedSeq);
    };
    const results = await Promise.allSettled([
      log.writer.appendRequired(LogEventType.turnStarted, { turnId: 'turn-1' }, started),
      log.prompt('a'),
      log.writer.exclusive((append) => append(LogEventType.userMessage, { turnId: 'turn-1' }, { text: 'b' })),
    ]);
    expect(results.map((result) => (result.status === 'rejected' ? result.reason : result.status))).toEqual([lost, lost, lost]);
    await expect(log.prompt('later')).rejects.toBe(lost);
    expect(log.events().map((event) => event.type === 'user.message' && event.data.text)).toEqual(['one']);
    expect(log.transcript.events).toHaveLength(1);
  });
});

describe('session writer, an acknowledgement lost (the event stored)', () => {
  it('knows the events of a group sent again under new ids by those ids when it looks for them in the log', async () => {
    const log = setup();
    await log.prompt('one');
    const original = log.log.appendGroup;
    log.log.appendGroup = async (events, _expectedSeq, onStored, options = {}) => {
      // `a` stored; another session's message came between it and `b` (the stream is shared), so `b` and `c` went
      // out again under new ids, were stored, and their acknowledgements were lost.
      onStored(0, log.foreign(events[0]!), events[0]!);
      for (const event of events.slice(1)) log.foreign(options.renew!(event));
      throw new TimeoutError('no reply within 10 ms', 10);
    };
    const [a, b, c] = await Promise.all([log.prompt('a'), log.prompt('b'), log.prompt('c')]);
    log.log.appendGroup = original;
    expect(log.events().map((event) => [event.id, event.type === 'user.message' && event.data.text])).toEqual([
      [expect.any(String), 'one'],
      [a.id, 'a'],
      [b.id, 'b'],
      [c.id, 'c'],
    ]);
    expect(log.transcript.events.map((event) => event.seq)).toEqual([1, 2, 3, 4]);
    expect((await log.prompt('after')).seq).toBe(5);
  });

  it('takes the events found stored and rejects the rest with the timeout, expecting the last one found', async () => {
    const log = setup();
    await log.prompt('one');
    const original = log.log.appendGroup;
    const timeout = new TimeoutError('no reply within 10 ms', 10);
    log.log.appendGroup = async (events) => {
      // `a` and `b` stored, their acknowledgements lost; `c` never reached the server.
      for (const event of events.slice(0, 2)) log.foreign(event);
      throw timeout;
    };
    const results = await Promise.allSettled([log.prompt('a'), log.prompt('b'), log.prompt('c')]);
    log.log.appendGroup = original;
    expect(results.map((result) => (result.status === 'fulfilled' ? result.value.seq : result.reason))).toEqual([2, 3, timeout]);
    expect(log.reads).toEqual([1]);
    expect((await log.prompt('after')).seq).toBe(4);
    expect(log.events().map((event) => event.type === 'user.message' && event.data.text)).toEqual(['one', 'a', 'b', 'after']);
  });
});
