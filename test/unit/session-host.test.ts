import { describe, expect, it } from 'vitest';
import { setTimeout as delay } from 'node:timers/promises';
import type { SessionLog } from '../../src/bus/session-log.ts';
import { openSession } from '../../services/runtime/sessions/session-host.ts';
import { sessionHostDeps } from '../helpers/session-host-deps.ts';

/** A log in memory whose acknowledgements come a few ms later, recording each write (a group or one append). */
function slowLog(): { log: SessionLog; writes: string[][] } {
  const writes: string[][] = [];
  let seq = 0;
  const log: SessionLog = {
    async append(event) {
      writes.push([event.type]);
      await delay(5);
      return ++seq;
    },
    async appendGroup(events, _expectedSeq, onStored) {
      writes.push(events.map((event) => event.type));
      await delay(5);
      events.forEach((event, index) => onStored(index, ++seq, event));
    },
    read: async () => ({ events: [], lastSeq: 0, more: false }),
    lastSeq: async () => seq,
  };
  return { log, writes };
}

describe('session host', () => {
  it('logs a new session with its first prompt in one group, and once when two prompts come together', async () => {
    const { log, writes } = slowLog();
    const host = await openSession(sessionHostDeps({ log }), 'acme', 'new-1');
    expect(writes).toEqual([]);
    await Promise.all([host.prompt({ text: 'one' }), host.prompt({ text: 'two' })]);
    expect(writes[0]!.slice(0, 2)).toEqual(['session.created', 'user.message']);
    expect(writes.flat().filter((type) => type === 'session.created')).toHaveLength(1);
    expect(writes.flat().filter((type) => type === 'user.message')).toHaveLength(2);
    await host.prompt({ text: 'three' });
    expect(writes.flat().filter((type) => type === 'session.created')).toHaveLength(1);
    host.stop();
  });

  it('logs the request a prompt came from, and recognises it when a kept copy is handled after a takeover', async () => {
    const { log, writes } = slowLog();
    const host = await openSession(sessionHostDeps({ log }), 'acme', 'dedupe-1');
    const first = await host.prompt({ text: 'one' }, { requestId: '_INBOX.abc.1' });
    // The same request again, as a node that took the session over hands it on: the turn already logged answers.
    expect(await host.prompt({ text: 'one' }, { requestId: '_INBOX.abc.1', dedupe: true })).toEqual(first);
    expect(writes.flat().filter((type) => type === 'user.message')).toHaveLength(1);
    // Another request, or the same one not marked as kept, is a prompt of its own.
    const other = await host.prompt({ text: 'one' }, { requestId: '_INBOX.abc.2', dedupe: true });
    expect(other.turnId).not.toBe(first.turnId);
    await host.prompt({ text: 'one' }, { requestId: '_INBOX.abc.1' });
    expect(writes.flat().filter((type) => type === 'user.message')).toHaveLength(3);
    host.stop();
  });
});
