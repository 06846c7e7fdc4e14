import { describe, expect, it } from 'vitest';
import type { JetStreamManager } from '@nats-io/jetstream';
import { SessionBusyError } from '../../src/errors.ts';
import { createSubjects } from '../../src/protocol/index.ts';
import { createSessionDeleter } from '../../services/runtime/sessions/session-delete.ts';
import type { SessionHost } from '../../services/runtime/sessions/session-host.ts';
import { silentLogger } from '../helpers/stack.ts';

/** A hosted session whose turn ends after `endsInMs` (never when undefined), as far as the deleter can see. */
function hostEndingIn(endsInMs: number | undefined): SessionHost {
  let busy = true;
  const waiters: Array<(idle: boolean) => void> = [];
  if (endsInMs !== undefined) {
    setTimeout(() => {
      busy = false;
      for (const resolve of waiters.splice(0)) resolve(true);
    }, endsInMs);
  }
  const host: Partial<SessionHost> = {
    busy: () => busy,
    whenIdle: () => (busy ? new Promise<boolean>((resolve) => waiters.push(resolve)) : Promise.resolve(true)),
    stop: () => undefined,
  };
  return host as SessionHost;
}

/** A deleter over fakes that record what it purged. */
function deleterFor(host: SessionHost) {
  const purged: string[] = [];
  const jsm = {
    streams: {
      purge: async (stream: string, options: { filter: string }) => {
        purged.push(`${stream} ${options.filter}`);
        return { success: true, purged: stream === 'LOG' ? 3 : 0 };
      },
    },
  } as unknown as JetStreamManager;
  const deleter = createSessionDeleter({
    jsm,
    streams: { log: 'LOG', live: 'LIVE', ledger: 'KV_LEDGER' },
    subjects: createSubjects('agentbus'),
    log: { lastSeq: async () => 3 },
    tombstones: { mark: async () => true, isDeleted: async () => false },
    leases: { forget: async () => undefined },
    hostedSession: async () => host,
    othersInFlight: () => 0,
    drop: () => undefined,
    logger: silentLogger(),
  });
  return { deleter, purged };
}

/** A hosted session that stops (given up, handed over) while its turn runs: its idle waiters hear false. */
function hostStoppingIn(ms: number): SessionHost {
  const waiters: Array<(idle: boolean) => void> = [];
  let stopped = false;
  setTimeout(() => {
    stopped = true;
    for (const resolve of waiters.splice(0)) resolve(false);
  }, ms);
  const host: Partial<SessionHost> = {
    busy: () => !stopped && true,
    whenIdle: () => (stopped ? Promise.resolve(false) : new Promise<boolean>((resolve) => waiters.push(resolve))),
    stop: () => undefined,
  };
  return host as SessionHost;
}

describe('deleting a session on its node', () => {
  it('deletes a session whose turn is ending (its turn.ended seen by the client, its machine not idle yet), not refusing it busy', async () => {
    const { deleter, purged } = deleterFor(hostEndingIn(30));
    expect(await deleter.delete('t', 's')).toEqual({ purged: 3, alreadyDeleted: false });
    expect(purged[0]).toBe('LOG agentbus.t.sessions.s.log');
  });

  it('refuses busy a session that stopped during the wait (handed over, given up): it is not this node\'s to delete now', async () => {
    const { deleter, purged } = deleterFor(hostStoppingIn(30));
    await expect(deleter.delete('t', 's')).rejects.toBeInstanceOf(SessionBusyError);
    expect(purged).toEqual([]);
  });

  it('refuses busy, after a short wait, a session whose turn goes on', async () => {
    const { deleter, purged } = deleterFor(hostEndingIn(undefined));
    const started = Date.now();
    await expect(deleter.delete('t', 's')).rejects.toBeInstanceOf(SessionBusyError);
    expect(Date.now() - started).toBeGreaterThanOrEqual(900);
    expect(purged).toEqual([]);
  });
});
