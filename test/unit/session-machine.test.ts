import { describe, expect, it, vi } from 'vitest';
import { createActor, fromPromise } from 'xstate';
import { sessionMachine } from '../../machines/session.ts';
import type { FinishTurnInput, QueuedTurn, SessionInput, StartTurnOutput } from '../../machines/session.ts';
import { turnMachine } from '../../machines/turn.ts';
import type { StreamOutput } from '../../machines/turn.ts';
import { TurnEndReason } from '../../src/protocol/index.ts';
import { answer, createTurnFakes, deferred, privileged, read, settle, untilAborted } from '../helpers/turn-fakes.ts';
import type { Deferred } from '../helpers/turn-fakes.ts';

function queued(turnId: string, extra: Partial<QueuedTurn> = {}): QueuedTurn {
  return { turnId, model: 'scripted:default', maxSteps: 8, ...extra };
}

async function until(condition: () => boolean, what: string): Promise<void> {
  for (let i = 0; i < 200; i += 1) {
    if (condition()) return;
    await settle();
  }
  throw new Error(`timed out waiting until ${what}`);
}

interface HarnessOptions {
  readonly finishTurn?: (input: FinishTurnInput) => Promise<void> | void;
  /** Streams answer at once with this output instead of waiting to be released. */
  readonly streamAnswer?: StreamOutput;
  /** What `startTurn` measures as the time left until each turn's deadline. */
  readonly timeLeftMs?: number;
  /** `startTurn` rejects with this. */
  readonly startError?: Error;
  /** `startTurn` resolves once this does. */
  readonly startGate?: Promise<void>;
}

/**
 * A session whose turns run on fakes: each turn's stream waits until the test releases it (or its signal
 * aborts), so the test decides when a turn ends. Tracks how many turns are between start and finish.
 */
function startSession(input: SessionInput = {}, options: HarnessOptions = {}) {
  const releases = new Map<string, Deferred<StreamOutput>>();
  const active = new Set<string>();
  let mostAtOnce = 0;
  const started: string[] = [];
  const finished: FinishTurnInput[] = [];
  const startedTurns: string[] = [];

  const gate = (turnId: string): Deferred<StreamOutput> => {
    let release = releases.get(turnId);
    if (!release) {
      release = deferred<StreamOutput>();
      releases.set(turnId, release);
    }
    return release;
  };

  const fakes = createTurnFakes({
    prepare: (prepareInput) => {
      if (!active.has(prepareInput.turnId)) {
        active.add(prepareInput.turnId);
        started.push(prepareInput.turnId);
        mostAtOnce = Math.max(mostAtOnce, active.size);
      }
      return { needsCompaction: false, request: { model: prepareInput.model, messages: [], tools: [] } };
    },
    stream: (streamInput, signal) =>
      options.streamAnswer ?? Promise.race([gate(streamInput.turnId).promise, untilAborted<StreamOutput>(signal)]),
  });

  const machine = sessionMachine.provide({
    actors: {
      turn: turnMachine.provide({ actors: fakes.actors }),
      startTurn: fromPromise<StartTurnOutput, QueuedTurn>(async ({ input: turn }) => {
        startedTurns.push(turn.turnId);
        if (options.startGate) await options.startGate;
        if (options.startError) throw options.startError;
        return options.timeLeftMs === undefined ? {} : { timeLeftMs: options.timeLeftMs };
      }),
      finishTurn: fromPromise<void, FinishTurnInput>(async ({ input: finishInput }) => {
        active.delete(finishInput.turn.turnId);
        finished.push(finishInput);
        if (options.finishTurn) await options.finishTurn(finishInput);
      }),
    },
  });
  const actor = createActor(machine, { input });
  actor.start();

  return {
    actor,
    fakes,
    started,
    finished,
    startedTurns,
    get mostAtOnce() {
      return mostAtOnce;
    },
    release(turnId: string, output: StreamOutput = answer(`answer to ${turnId}`)) {
      gate(turnId).resolve(output);
    },
    streaming(turnId: string) {
      return until(() => fakes.calls.stream.some((call) => call.input.turnId === turnId), `${turnId} streams`);
    },
    finishedCount(count: number) {
      return until(() => finished.length >= count, `${count} turns finished`);
    },
  };
}

describe('session machine', () => {
  it('runs two prompts one after another, in the order they came, never two at once', async () => {
    const session = startSession();

    session.actor.send({ type: 'PROMPT', turn: queued('a') });
    session.actor.send({ type: 'PROMPT', turn: queued('b') });
    await session.streaming('a');
    await settle();
    expect(session.started).toEqual(['a']);

    session.release('a');
    await session.streaming('b');
    session.release('b');
    await session.finishedCount(2);

    expect(session.started).toEqual(['a', 'b']);
    expect(session.finished.map((entry) => entry.turn.turnId)).toEqual(['a', 'b']);
    expect(session.mostAtOnce).toBe(1);
    expect(session.actor.getSnapshot().value).toBe('idle');
  });

  it('queues a prompt that arrives while a turn runs and starts it only once that turn is finished', async () => {
    const session = startSession();
    session.actor.send({ type: 'PROMPT', turn: queued('a') });
    await session.streaming('a');

    session.actor.send({ type: 'PROMPT', turn: queued('b') });

    const snapshot = session.actor.getSnapshot();
    expect(snapshot.value).toBe('running');
    expect(snapshot.context.current?.turnId).toBe('a');
    expect(snapshot.context.queue.map((turn) => turn.turnId)).toEqual(['b']);

    session.release('a');
    await session.streaming('b');
    expect(session.finished.map((entry) => entry.turn.turnId)).toEqual(['a']);
    expect(session.actor.getSnapshot().context.queue).toEqual([]);
    session.actor.stop();
  });

  it('hands each turn and its output to finishTurn', async () => {
    const session = startSession({}, { streamAnswer: answer('hi there', [], 0.02) });

    session.actor.send({ type: 'PROMPT', turn: queued('a') });
    await session.finishedCount(1);

    expect(session.finished[0]).toEqual({
      turn: queued('a'),
      output: { reason: TurnEndReason.yielded, text: 'hi there', usage: { inputTokens: 10, outputTokens: 5 }, cost: 0.02, steps: 1 },
    });
  });

  it('forwards CANCEL to the running turn only: it ends cancelled and the queued turn still runs', async () => {
    const session = startSession();
    session.actor.send({ type: 'PROMPT', turn: queued('a') });
    session.actor.send({ type: 'PROMPT', turn: queued('b') });
    await session.streaming('a');

    session.actor.send({ type: 'CANCEL' });
    await session.streaming('b');

    expect(session.fakes.calls.stream[0]?.signal.aborted).toBe(true);
    expect(session.finished[0]?.output.reason).toBe(TurnEndReason.cancelled);

    session.release('b');
    await session.finishedCount(2);
    expect(session.finished[1]?.output.reason).toBe(TurnEndReason.yielded);
  });

  it('ignores a CANCEL while idle, so a prompt sent afterwards runs normally', async () => {
    const session = startSession({}, { streamAnswer: answer('fine') });

    session.actor.send({ type: 'CANCEL' });
    session.actor.send({ type: 'PROMPT', turn: queued('a') });
    await session.finishedCount(1);

    expect(session.finished[0]?.output.reason).toBe(TurnEndReason.yielded);
  });

  it('forwards APPROVAL to the running turn', async () => {
    const session = startSession({}, { streamAnswer: answer('', [privileged('p1')]) });
    session.actor.send({ type: 'PROMPT', turn: queued('a', { maxSteps: 1 }) });
    await until(() => session.fakes.calls.requestApproval.length === 1, 'approval is requested');

    session.actor.send({ type: 'APPROVAL', toolCallId: 'p1', approved: true });
    await session.finishedCount(1);

    expect(session.fakes.calls.executeTools[0]?.input.decisions).toEqual({ p1: { approved: true } });
    expect(session.finished[0]?.output.reason).toBe(TurnEndReason.budgetExceeded);
  });

  it('stops in unwritable when finishTurn fails, leaving the queued turns to the log', async () => {
    const session = startSession(
      {},
      {
        streamAnswer: answer('ok'),
        finishTurn: (input) => (input.turn.turnId === 'a' ? Promise.reject(new Error('log append failed')) : undefined),
      },
    );

    session.actor.send({ type: 'PROMPT', turn: queued('a') });
    session.actor.send({ type: 'PROMPT', turn: queued('b') });
    await vi.waitFor(() => expect(session.actor.getSnapshot().status).toBe('done'));

    // The log holds a turn without its end: this actor no longer matches it, so it runs nothing more; the
    // runtime opens the session again from its log, which resumes a and b.
    expect(session.actor.getSnapshot().value).toBe('unwritable');
    expect(session.started).toEqual(['a']);
    expect(session.finished.map((entry) => entry.turn.turnId)).toEqual(['a']);
  });

  it('runs the turns of its initial queue first, in order, before a prompt sent after start', async () => {
    const session = startSession({ queue: [queued('old-1'), queued('old-2')] });

    session.actor.send({ type: 'PROMPT', turn: queued('new') });
    await session.streaming('old-1');
    session.release('old-1');
    await session.streaming('old-2');
    session.release('old-2');
    await session.streaming('new');
    session.release('new');
    await session.finishedCount(3);

    expect(session.started).toEqual(['old-1', 'old-2', 'new']);
    expect(session.mostAtOnce).toBe(1);
  });

  it('passes maxCost and resume of a queued turn on to the turn', async () => {
    const resume = { step: 2, pendingCalls: [read('r1')], decisions: {}, usage: { inputTokens: 1, outputTokens: 1 }, cost: 0.5 };
    const session = startSession({ queue: [queued('a', { maxCost: 0.55, maxSteps: 4, resume })] }, { streamAnswer: answer('', [], 0.1) });

    await session.finishedCount(1);

    expect(session.fakes.log.slice(0, 1)).toEqual(['executeTools:r1']);
    expect(session.fakes.calls.executeTools[0]?.input).toMatchObject({ step: 2, maxSteps: 4 });
    expect(session.finished[0]?.output).toMatchObject({ reason: TurnEndReason.budgetExceeded, steps: 3 });
  });

  it('starts each turn (startTurn) before it runs, and hands the time it measured to the turn, whose deadline ends it', async () => {
    const session = startSession({ queue: [queued('a'), queued('b')] }, { timeLeftMs: 30 });

    // The deadline is a real 30 ms timer: waited for by the clock, not by a count of event-loop turns.
    await vi.waitFor(() => expect(session.finished).toHaveLength(2), { timeout: 5_000, interval: 5 });

    expect(session.startedTurns).toEqual(['a', 'b']);
    expect(session.finished.map((entry) => entry.output.reason)).toEqual([TurnEndReason.deadlineExceeded, TurnEndReason.deadlineExceeded]);
    expect(session.finished[0]?.output.error).toMatchObject({ code: 'deadline_exceeded' });
    expect(session.fakes.calls.stream[0]?.signal.aborted).toBe(true);
  });

  it('ends a turn cancelled while it starts without running a step, and goes on with the next', async () => {
    const gate = deferred<void>();
    const session = startSession({ queue: [queued('a'), queued('b')] }, { startGate: gate.promise, streamAnswer: answer('b done') });
    await until(() => session.startedTurns.length === 1, 'a starts');

    session.actor.send({ type: 'CANCEL' });
    gate.resolve();
    await session.finishedCount(2);

    expect(session.finished.map((entry) => [entry.turn.turnId, entry.output.reason])).toEqual([
      ['a', TurnEndReason.cancelled],
      ['b', TurnEndReason.yielded],
    ]);
    expect(session.started).toEqual(['b']);
  });

  it('ends a turn failed when it cannot start (its turn.started is not logged), running no step of it', async () => {
    const session = startSession({ queue: [queued('a')] }, { startError: new Error('log unreachable') });

    await session.finishedCount(1);

    expect(session.finished[0]?.output).toMatchObject({ reason: TurnEndReason.failed, error: { message: 'log unreachable' }, steps: 0 });
    expect(session.started).toEqual([]);
  });
});

describe('state reports', () => {
  it('names each state a machine rests in and the event that led there, and none it only passes through', async () => {
    const seen: string[] = [];
    const report = (machine: string) => ({ event }: { event: { type: string } }, { value }: { value: string }) => void seen.push(`${machine} ${value} ${event.type}`);
    const fakes = createTurnFakes();
    let streams = 0;
    const machine = sessionMachine.provide({
      actors: {
        turn: turnMachine.provide({
          actors: { ...fakes.actors, stream: fromPromise(async () => (++streams === 1 ? answer('', [read('c1')]) : answer('done'))) },
          actions: { stateEntered: report('turn') },
        }),
        startTurn: fromPromise<StartTurnOutput, QueuedTurn>(async () => ({})),
        finishTurn: fromPromise<void, FinishTurnInput>(async () => {}),
      },
      actions: { stateEntered: report('session') },
    });
    const actor = createActor(machine, { input: { queue: [queued('a')] } });
    actor.start();
    await until(() => actor.getSnapshot().value === 'idle' && seen.at(-1)?.startsWith('session idle') === true, 'the turn ended');
    expect(seen.map((line) => line.replace(/xstate\.(done|error)\.actor\.\S+/, 'done'))).toEqual([
      // `idle` on the way to `starting` is entered too: what publishes the states (the runtime) keeps the last.
      'session idle xstate.init',
      'session starting xstate.init',
      'session running done',
      'turn Preparing xstate.init',
      'turn Streaming done',
      'turn ToolExecution done',
      'turn Preparing done',
      'turn Streaming done',
      'turn Yielding done',
      'session finishing done',
      'session idle done',
    ]);
  });
});
