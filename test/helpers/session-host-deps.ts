import { pino } from 'pino';
import { fromPromise } from 'xstate';
import type { SessionLog } from '../../src/bus/session-log.ts';
import { createEnvelopeFactory, ZERO_USAGE } from '../../src/protocol/index.ts';
import { createScrubber } from '../../src/scrub/index.ts';
import { createTokenCounter } from '../../src/tokens.ts';
import { sessionMachine } from '../../machines/index.ts';
import type { FinishTurnInput, QueuedTurn, StartTurnOutput, TurnOutput } from '../../machines/index.ts';
import { DEFAULT_RUNTIME_CONFIG } from '../../services/runtime/config.ts';
import type { SessionHost, SessionHostDeps } from '../../services/runtime/sessions/session-host.ts';
import type { SessionLogic } from '../../services/runtime/turn/turn-actors.ts';

/** A log in memory that stores every append at once. */
export function memoryLog(): SessionLog {
  let seq = 0;
  return {
    append: async () => ++seq,
    appendGroup: async (events, _expectedSeq, onStored) => events.forEach((event, index) => onStored(index, ++seq, event)),
    read: async () => ({ events: [], lastSeq: 0, more: false }),
    lastSeq: async () => seq,
  };
}

/**
 * What a session host needs, for tests of the host itself: turns that yield once `turnDone` resolves (at once
 * by default), a `finishTurn` that does as `finish` says, and services the host never calls.
 */
export function sessionHostDeps(options: {
  log?: SessionLog;
  finish?: () => Promise<void>;
  turnDone?: Promise<void>;
  giveUp?: (session: SessionHost) => void;
} = {}): SessionHostDeps {
  const output: TurnOutput = { reason: 'yielded', text: 'ok', usage: ZERO_USAGE, cost: 0, steps: 1 };
  const turnDone = options.turnDone ?? Promise.resolve();
  const machine = sessionMachine.provide({
    actors: {
      turn: fromPromise(async () => (await turnDone, output)) as never,
      startTurn: fromPromise<StartTurnOutput, QueuedTurn>(async () => ({})),
      finishTurn: fromPromise<void, FinishTurnInput>(options.finish ?? (async () => undefined)),
    },
  }) as SessionLogic['machine'];
  let id = 0;
  const notUsed = () => {
    throw new Error('not used by the session host');
  };
  return {
    logic: { machine, bind: () => undefined, prepareDryRun: notUsed },
    log: options.log ?? memoryLog(),
    envelopes: createEnvelopeFactory({ newId: () => `e${id++}`, now: () => 1 }),
    live: { publish: () => undefined },
    provider: { generate: notUsed },
    tools: { listTools: async () => [], call: notUsed },
    tokens: createTokenCounter(),
    toolTokens: () => 0,
    scrubber: createScrubber(),
    logger: pino({ level: 'silent' }),
    config: { ...DEFAULT_RUNTIME_CONFIG, nodeId: 'node-1' },
    newId: () => `id${id++}`,
    now: Date.now,
    ...(options.giveUp ? { giveUp: options.giveUp } : {}),
  };
}
