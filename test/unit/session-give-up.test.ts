import { describe, expect, it } from 'vitest';
import { LogConflictError } from '../../src/errors.ts';
import { openSession } from '../../services/runtime/sessions/session-host.ts';
import type { SessionHost } from '../../services/runtime/sessions/session-host.ts';
import { sessionHostDeps } from '../helpers/session-host-deps.ts';

/** Host deps whose turns end once `turnDone` resolves, and whose `finishTurn` does as `finish` says. */
const hostDeps = (finish: () => Promise<void>, giveUp?: (session: SessionHost) => void, turnDone?: Promise<void>) =>
  sessionHostDeps({ finish, ...(giveUp ? { giveUp } : {}), ...(turnDone ? { turnDone } : {}) });

describe('session host, when a turn cannot write its end', () => {
  it('hands itself to the runtime once, and is not idle to its waiters', async () => {
    const given: SessionHost[] = [];
    let endTurn = () => {};
    const turnDone = new Promise<void>((resolve) => (endTurn = resolve));
    const deps = hostDeps(
      () => Promise.reject(new LogConflictError('s1', 3)),
      (session) => {
        given.push(session);
        session.stop();
      },
      turnDone,
    );
    const host = await openSession(deps, 'acme', 's1');
    await host.prompt({ text: 'one' });
    await host.prompt({ text: 'two' });
    // Asked while the turn runs: a waiter must not take the given-up session for an idle one.
    const idle = host.whenIdle();
    expect(host.busy()).toBe(true);
    endTurn();
    expect(await idle).toBe(false);
    expect(await host.whenIdle()).toBe(false);
    expect(given).toEqual([host]);
  });

  it('stops itself when the runtime gave no way to hand it over', async () => {
    const host = await openSession(hostDeps(() => Promise.reject(new Error('log unreachable'))), 'acme', 's2');
    await host.prompt({ text: 'one' });
    expect(await host.whenIdle()).toBe(false);
    expect(host.busy()).toBe(false);
  });

  it('stays hosted when the turn ends in the log', async () => {
    const given: SessionHost[] = [];
    const host = await openSession(hostDeps(async () => undefined, (session) => void given.push(session)), 'acme', 's3');
    await host.prompt({ text: 'one' });
    expect(await host.whenIdle()).toBe(true);
    expect(given).toEqual([]);
    host.stop();
  });
});
