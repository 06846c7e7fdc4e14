import { assign, fromPromise, sendTo, setup } from 'xstate';
import { TurnEndReason, ZERO_USAGE, toErrorData } from '../src/protocol/index.ts';
import { turnMachine } from './turn.ts';
import type { TurnInput, TurnOutput } from './turn.ts';

/** A prompt accepted into the session, durable in the log as its `user.message`: the input of its turn. */
export type QueuedTurn = TurnInput;

export interface FinishTurnInput {
  readonly turn: QueuedTurn;
  readonly output: TurnOutput;
}

export type SessionEvent =
  | { type: 'PROMPT'; turn: QueuedTurn }
  | { type: 'CANCEL'; reason?: string }
  | { type: 'APPROVAL'; toolCallId: string; approved: boolean; reason?: string };

interface SessionContext {
  readonly queue: readonly QueuedTurn[];
  readonly current: QueuedTurn | undefined;
  readonly output: TurnOutput | undefined;
}

export interface SessionInput {
  /** Turns to run first, in order: those the log holds without a `turn.ended`. */
  readonly queue?: readonly QueuedTurn[];
}

/**
 * One session: runs one turn at a time; prompts that arrive meanwhile wait in order. The turn machine
 * (with its actors) and `finishTurn` (which closes the transcript and appends `turn.ended`) are provided
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
    finishTurn: fromPromise<void, FinishTurnInput>(() => Promise.reject(new Error('session actor "finishTurn" was not provided'))),
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
      always: { guard: 'hasQueued', target: 'running' },
    },
    running: {
      entry: assign(({ context }) => ({ current: context.queue[0], queue: context.queue.slice(1), output: undefined })),
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
          actions: assign({
            output: ({ event }) => ({
              reason: TurnEndReason.failed,
              error: toErrorData(event.error),
              usage: ZERO_USAGE,
              cost: 0,
              steps: 0,
            }),
          }),
        },
      },
      on: {
        CANCEL: { actions: sendTo('turn', ({ event }) => event) },
        APPROVAL: { actions: sendTo('turn', ({ event }) => event) },
      },
    },
    finishing: {
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
    unwritable: { type: 'final' },
  },
});
