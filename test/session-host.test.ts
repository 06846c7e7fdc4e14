import { describe, expect, it } from 'vitest';
import { setTimeout as delay } from 'node:timers/promises';
import { pino } from 'pino';
import { fromPromise } from 'xstate';
import type { SessionLog } from '../src/bus/session-log.ts';
import { createEnvelopeFactory, ZERO_USAGE } from '../src/protocol/index.ts';
import { createScrubber } from '../src/scrub.ts';
import { createTokenCounter } from '../src/tokens.ts';
import { sessionMachine } from '../machines/index.ts';
import type { FinishTurnInput, TurnOutput } from '../machines/index.ts';
import { DEFAULT_RUNTIME_CONFIG } from '../services/runtime/config.ts';
import { openSession } from '../services/runtime/session-host.ts';
import type { SessionHostDeps } from '../services/runtime/session-host.ts';
import type { SessionLogic } from '../services/runtime/turn-actors.ts';

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
      events.forEach((_, index) => onStored(index, ++seq));
    },
    read: async () => ({ events: [], lastSeq: 0 }),
    lastSeq: async () => seq,
  };
  return { log, writes };
}

function hostDeps(log: SessionLog): SessionHostDeps {
  const output: TurnOutput = { reason: 'yielded', text: 'ok', usage: ZERO_USAGE, cost: 0, steps: 1 };
  // Turns that end at once: this test is about what the host logs, not about turns.
  const machine = sessionMachine.provide({
    actors: { turn: fromPromise(async () => output) as never, finishTurn: fromPromise<void, FinishTurnInput>(async () => undefined) },
  }) as SessionLogic['machine'];
  let id = 0;
  return {
    logic: { machine, bind: () => undefined },
    log,
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
  };
}

describe('session host', () => {
  it('logs a new session with its first prompt in one group, and once when two prompts come together', async () => {
    const { log, writes } = slowLog();
    const host = await openSession(hostDeps(log), 'acme', 'new-1');
    expect(writes).toEqual([]);
    await Promise.all([host.prompt({ text: 'one' }), host.prompt({ text: 'two' })]);
    expect(writes[0]!.slice(0, 2)).toEqual(['session.created', 'user.message']);
    expect(writes.flat().filter((type) => type === 'session.created')).toHaveLength(1);
    expect(writes.flat().filter((type) => type === 'user.message')).toHaveLength(2);
    await host.prompt({ text: 'three' });
    expect(writes.flat().filter((type) => type === 'session.created')).toHaveLength(1);
    host.stop();
  });
});
