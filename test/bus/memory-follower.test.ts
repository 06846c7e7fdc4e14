import { describe, expect, it } from 'vitest';
import { jetstream, jetstreamManager } from '@nats-io/jetstream';
import { ensureStreams } from '../../src/bus/streams.ts';
import { LogEventType, createCodec, createEnvelopeFactory, createSubjects, streamNames } from '../../src/protocol/index.ts';
import { followLog } from '../../services/memory/log-follower.ts';
import { useNatsServer } from '../helpers/nats-fixture.ts';
import { silentLogger } from '../helpers/stack.ts';

// The memory service's log follower says it has caught up once it has read what is there: also when the log's
// last sequence names messages a session delete purged since.

const nats = useNatsServer();
const subjects = createSubjects('agentbus');

describe('the memory log follower', () => {
  it('is caught up when the newest log messages were purged (a deleted session), not waiting for their sequence', async () => {
    const jsm = await jetstreamManager(nats.nc);
    await ensureStreams(jsm, { prefix: 'agentbus' });
    const js = jetstream(nats.nc);
    await js.publish(subjects.log('acme', 'kept'), new TextEncoder().encode('junk, skipped but read'));
    await js.publish(subjects.log('acme', 'gone'), new TextEncoder().encode('one'));
    await js.publish(subjects.log('acme', 'gone'), new TextEncoder().encode('two'));
    await jsm.streams.purge(streamNames().log, { filter: subjects.log('acme', 'gone') });
    expect((await jsm.streams.info(streamNames().log)).state.last_seq).toBe(3);

    const follower = await followLog({ nc: nats.nc, codec: createCodec(), subjects, stream: streamNames().log, logger: silentLogger(), onEvent: () => undefined });
    try {
      await expect(Promise.race([follower.caughtUp.then(() => 'caught up'), new Promise((resolve) => setTimeout(() => resolve('still waiting'), 3000))])).resolves.toBe('caught up');
      expect(follower.lastSeq()).toBe(1);
      // With nothing at all left in the log, too.
      await jsm.streams.purge(streamNames().log);
      const empty = await followLog({ nc: nats.nc, codec: createCodec(), subjects, stream: streamNames().log, logger: silentLogger(), onEvent: () => undefined });
      await expect(Promise.race([empty.caughtUp.then(() => 'caught up'), new Promise((resolve) => setTimeout(() => resolve('still waiting'), 3000))])).resolves.toBe('caught up');
      empty.stop();
    } finally {
      follower.stop();
    }
  });
});

describe('the memory log follower, in batches', () => {
  it('hands on every event once, in log order, and resumes after the last one handed on', async () => {
    const jsm = await jetstreamManager(nats.nc);
    await ensureStreams(jsm, { prefix: 'agentbus' });
    await jsm.streams.purge(streamNames().log);
    const js = jetstream(nats.nc);
    const codec = createCodec();
    const envelopes = createEnvelopeFactory({ newId: () => `e${Math.random()}`, now: () => 1 });
    const publish = async (from: number, count: number) => {
      for (let index = from; index < from + count; index++) {
        const sessionId = `s${index % 7}`;
        await js.publish(subjects.log('acme', sessionId), codec.encode(envelopes.create(LogEventType.userMessage, { tenant: 'acme', sessionId, turnId: 't', step: 1 }, { text: `message ${index}` })));
      }
    };
    // More than one pulled batch and more than one yield to the event loop (every 64 events).
    await publish(0, 300);
    const seen: Array<{ seq: number; text: string }> = [];
    const follow = (afterSeq: number) =>
      followLog({ nc: nats.nc, codec, subjects, stream: streamNames().log, logger: silentLogger(), afterSeq, onEvent: ({ seq, event }) => void seen.push({ seq, text: event.type === LogEventType.userMessage ? event.data.text : '' }) });
    const first = await follow(0);
    await first.caughtUp;
    await expect.poll(() => seen.length, { timeout: 10_000 }).toBe(300);
    const resumeAt = first.lastSeq();
    first.stop();
    expect(resumeAt).toBe(seen.at(-1)!.seq);
    // A restart from the resume point (as from a snapshot) hands on only what came after it.
    await publish(300, 100);
    const second = await follow(resumeAt);
    await expect.poll(() => seen.length, { timeout: 10_000 }).toBe(400);
    second.stop();
    expect(seen.map((entry) => entry.text)).toEqual(Array.from({ length: 400 }, (_, index) => `message ${index}`));
    const seqs = seen.map((entry) => entry.seq);
    expect(seqs.every((seq, index) => index === 0 || seq > seqs[index - 1]!)).toBe(true);
  });
});
