import { describe, expect, it } from 'vitest';
import { jetstream, jetstreamManager } from '@nats-io/jetstream';
import { ensureStreams } from '../../src/bus/streams.ts';
import { createCodec, createSubjects, streamNames } from '../../src/protocol/index.ts';
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
