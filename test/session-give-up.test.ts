import { describe, expect, it } from 'vitest';
import { pino } from 'pino';
import { fromPromise } from 'xstate';
import type { SessionLog } from '../src/bus/session-log.ts';
import { LogConflictError } from '../src/errors.ts';
import { createEnvelopeFactory, ZERO_USAGE } from '../src/protocol/index.ts';
import { createScrubber } from '../src/scrub.ts';
import { createTokenCounter } from '../src/tokens.ts';
import { sessionMachine } from '../machines/index.ts';
import type { FinishTurnInput, TurnOutput } from '../machines/index.ts';
import { DEFAULT_RUNTIME_CONFIG } from '../services/runtime/config.ts';
import { openSession } from '../services/runtime/session-host.ts';
import type { SessionHost, SessionHostDeps } from '../services/runtime/session-host.ts';
import type { SessionLogic } from '../services/runtime/turn-actors.ts';

/** A log in memory that stores every append. */
function memoryLog(): SessionLog {
  let seq = 0;
  return {
    append: async () => ++seq,
    appendGroup: async (events, _expectedSeq, onStored) => events.forEach((_, index) => onStored(index, ++seq)),
    read: async () => ({ events: [], lastSeq: 0 }),
    lastSeq: async () => seq,
  };
}

/** Host deps whose turns end once `turnDone` resolves, and whose `finishTurn` does as `finish` says. */
function hostDeps(finish: () => Promise<void>, giveUp?: (session: SessionHost) => void, turnDone: Promise<void> = Promise.resolve()): SessionHostDeps {
  const output: TurnOutput = { reason: 'yielded', text: 'ok', usage: ZERO_USAGE, cost: 0, steps: 1 };
  const machine = sessionMachine.provide({
    actors: { turn: fromPromise(async () => (await turnDone, output)) as never, finishTurn: fromPromise<void, FinishTurnInput>(finish) },
  }) as SessionLogic['machine'];
  let id = 0;
  return {
    logic: { machine, bind: () => undefined },
    log: memoryLog(),
    envelopes: createEnvelopeFactory({ newId: () => `e${id++}`, now: () => 1 }),
    live: { publish: () => undefined },
    provider: { generate: () => { throw new Error('not used'); } },
    tools: { listTools: async () => [], call: () => { throw new Error('not used'); } },
    tokens: createTokenCounter(),
    toolTokens: () => 0,
    scrubber: createScrubber(),
    logger: pino({ level: 'silent' }),
    config: { ...DEFAULT_RUNTIME_CONFIG, nodeId: 'node-1' },
    newId: () => `id${id++}`,
    now: Date.now,
    ...(giveUp ? { giveUp } : {}),
  };
}

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
