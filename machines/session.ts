import { assign, fromPromise, sendTo, setup } from 'xstate';
import { TurnEndReason, ZERO_USAGE, toErrorData } from '../src/protocol/index.ts';
import { turnMachine } from './turn.ts';
import type { TurnEvent, TurnInput, TurnOutput } from './turn.ts';
import type { ErrorData } from '../src/protocol/index.ts';

/** A prompt accepted into the session, durable in the log as its `user.message`: the input of its turn. */
export type QueuedTurn = TurnInput;

/**
 * What starting a turn measured: the milliseconds left until its deadline (absent: none). The start logs
 * `turn.started` (once per turn: a resumed turn keeps the one in the log).
 */
export interface StartTurnOutput {
  readonly timeLeftMs?: number;
}

export interface FinishTurnInput {
  readonly turn: QueuedTurn;
  readonly output: TurnOutput;
}

export type SessionEvent =
  | { type: 'PROMPT'; turn: QueuedTurn }
  | { type: 'CANCEL'; reason?: string }
  | Extract<TurnEvent, { type: 'APPROVAL' | 'INPUT' }>;

/** The session machine's states. */
export type SessionState = 'idle' | 'starting' | 'running' | 'finishing' | 'unwritable';

interface SessionContext {
  readonly queue: readonly QueuedTurn[];
  readonly current: QueuedTurn | undefined;
  readonly output: TurnOutput | undefined;
}

export interface SessionInput {
  /** Turns to run first, in order: those the log holds without a `turn.ended`. */
  readonly queue?: readonly QueuedTurn[];
}

/** The output of a turn that ran no step. */
function endedBeforeStart(reason: TurnEndReason, error?: ErrorData): TurnOutput {
  return { reason, ...(error ? { error } : {}), usage: ZERO_USAGE, cost: 0, steps: 0 };
}

/**
 * One session: runs one turn at a time; prompts that arrive meanwhile wait in order. The turn machine
 * (with its actors), `startTurn` (which logs `turn.started` and measures the time left to its deadline) and `finishTurn` (which closes the transcript and appends `turn.ended`) are provided
 * by the runtime.
 */
export const sessionMachine = setup({
  types: {
    context: {} as SessionContext,
    events: {} as SessionEvent,
    input: {} as SessionInput,
  },
  actors: {
    turn: turnMachine,
    startTurn: fromPromise<StartTurnOutput, QueuedTurn>(() => Promise.reject(new Error('session actor "startTurn" was not provided'))),
    finishTurn: fromPromise<void, FinishTurnInput>(() => Promise.reject(new Error('session actor "finishTurn" was not provided'))),
  },
  actions: {
    /**
     * Entry of a state, with the event that led there: the runtime publishes it as the live `state` event. Does
     * nothing unless provided.
     */
    stateEntered: (_, _params: { value: SessionState }) => {},
  },
  guards: {
    hasQueued: ({ context }) => context.queue.length > 0,
  },
}).createMachine({
  id: 'session',
  context: ({ input }) => ({ queue: input.queue ?? [], current: undefined, output: undefined }),
  initial: 'idle',
  on: {
    PROMPT: { actions: assign({ queue: ({ context, event }) => [...context.queue, event.turn] }) },
  },
  states: {
    idle: {
      entry: { type: 'stateEntered', params: { value: 'idle' } },
      always: { guard: 'hasQueued', target: 'starting' },
    },
    starting: {
      entry: [
        assign(({ context }) => ({ current: context.queue[0], queue: context.queue.slice(1), output: undefined })),
        { type: 'stateEntered', params: { value: 'starting' } },
      ],
      invoke: {
        src: 'startTurn',
        input: ({ context }) => {
          if (!context.current) throw new Error('starting without a current turn');
          return context.current;
        },
        onDone: {
          target: 'running',
          actions: assign(({ context, event }) => ({
            current: context.current && event.output.timeLeftMs !== undefined ? { ...context.current, timeLeftMs: event.output.timeLeftMs } : context.current,
          })),
        },
        onError: { target: 'finishing', actions: assign({ output: ({ event }) => endedBeforeStart(TurnEndReason.failed, toErrorData(event.error)) }) },
      },
      on: {
        // Cancelled before its first step: the turn ends with nothing run.
        CANCEL: { target: 'finishing', actions: assign({ output: () => endedBeforeStart(TurnEndReason.cancelled) }) },
      },
    },
    running: {
      entry: { type: 'stateEntered', params: { value: 'running' } },
      invoke: {
        id: 'turn',
        src: 'turn',
        input: ({ context }) => {
          if (!context.current) throw new Error('running without a current turn');
          return context.current;
        },
        onDone: { target: 'finishing', actions: assign({ output: ({ event }) => event.output }) },
        onError: {
          target: 'finishing',
          actions: assign({ output: ({ event }) => endedBeforeStart(TurnEndReason.failed, toErrorData(event.error)) }),
        },
      },
      on: {
        CANCEL: { actions: sendTo('turn', ({ event }) => event) },
        APPROVAL: { actions: sendTo('turn', ({ event }) => event) },
        INPUT: { actions: sendTo('turn', ({ event }) => event) },
      },
    },
    finishing: {
      entry: { type: 'stateEntered', params: { value: 'finishing' } },
      invoke: {
        src: 'finishTurn',
        input: ({ context }) => {
          if (!context.current || !context.output) throw new Error('finishing without a turn');
          return { turn: context.current, output: context.output };
        },
        onDone: { target: 'idle', actions: assign({ current: undefined, output: undefined }) },
        // The turn's end is not in the log, so what this actor holds no longer matches the log: it stops, and
        // the runtime opens the session again from its log, which resumes this turn and the queued ones.
        onError: { target: 'unwritable' },
      },
    },
    unwritable: { type: 'final', entry: { type: 'stateEntered', params: { value: 'unwritable' } } },
  },
});
