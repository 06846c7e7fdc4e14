import { afterAll, beforeAll, describe, expect, it, vi } from 'vitest';
import { SimulatedClock, createActor, fromPromise, getInitialSnapshot, transition } from 'xstate';
import type { SnapshotFrom } from 'xstate';
import { getAdjacencyMap, getShortestPaths, serializeSnapshot } from 'xstate/graph';
import type { AdjacencyMap, StatePath } from 'xstate/graph';
import { nextBatch } from '../../machines/tool-batch.ts';
import type { PlannedCall } from '../../machines/tool-batch.ts';
import { closeTranscript } from '../../machines/transcript.ts';
import { turnMachine } from '../../machines/turn.ts';
import type { CompactOutput, PrepareOutput, StreamOutput, TurnEvent, TurnInput } from '../../machines/turn.ts';
import { ProviderError, TimeoutError } from '../../src/errors.ts';
import { ErrorCode, RunState, TurnEndReason, ZERO_USAGE } from '../../src/protocol/index.ts';
import { REQUEST, answer, deferred, privileged, read, untilAborted, write } from '../helpers/turn-fakes.ts';
import type { Deferred } from '../helpers/turn-fakes.ts';

/*
 * Model-based tests: xstate/graph walks the pure turn machine with the events its invoked actors and its
 * clients can send (actor done/error events, the approval timeout, APPROVAL, CANCEL) and every path is
 * checked against the invariants of CONVENTIONS 15. `createTestModel` refuses machines with `invoke` or
 * `after`, so the replay of paths against a live actor is done here by hand.
 */

type TurnSnapshot = SnapshotFrom<typeof turnMachine>;
type TurnAdjacency = AdjacencyMap<TurnSnapshot, TurnEvent>;
type TurnPath = StatePath<TurnSnapshot, TurnEvent>;
type TurnNode = TurnAdjacency[keyof TurnAdjacency];

/** An event as the traversal feeds it: a client event or one an invoked actor or timer would send. */
interface ModelEvent {
  readonly type: string;
  /** Tells apart events of one type, for coverage and so the traversal keeps them apart. */
  readonly variant: string;
  readonly output?: unknown;
  readonly error?: unknown;
  readonly toolCallId?: string;
  readonly approved?: boolean;
  readonly reason?: string;
}

const MAX_COST = 1;
const TERMINAL: ReadonlySet<string> = new Set([RunState.yielding, RunState.cancelled, RunState.budgetExceeded, RunState.failed]);
const END_REASON: Readonly<Record<string, readonly string[]>> = {
  [RunState.yielding]: [TurnEndReason.yielded],
  [RunState.cancelled]: [TurnEndReason.cancelled],
  [RunState.budgetExceeded]: [TurnEndReason.budgetExceeded],
  [RunState.failed]: [TurnEndReason.failed, TurnEndReason.timeout],
};

const BASE_INPUT: TurnInput = { turnId: 'turn-1', model: 'scripted:default', maxSteps: 2, maxCost: MAX_COST };

function done(id: string, variant: string, output: unknown): ModelEvent {
  return { type: `xstate.done.actor.${id}`, variant, output };
}
function failed(id: string, variant: string, error: unknown): ModelEvent {
  return { type: `xstate.error.actor.${id}`, variant, error };
}

/** The representative events in a snapshot; call ids carry the step so every step asks for new calls. */
function eventsFor(snapshot: TurnSnapshot): ModelEvent[] {
  const step = snapshot.context.step;
  const id = (name: string) => `s${step}-${name}`;
  const next = snapshot.context.pending[0]?.id ?? 'none';
  const prepared = (needsCompaction: boolean): PrepareOutput => ({ needsCompaction, request: REQUEST });
  const streamed = (output: StreamOutput) => output;
  return [
    done('prepare', 'fits', prepared(false)),
    done('prepare', 'needs compaction', prepared(true)),
    failed('prepare', 'history unreadable', new Error('history unreadable')),
    done('compact', 'compacted', { usage: ZERO_USAGE, cost: 0 }),
    failed('compact', 'summary failed', new Error('summary failed')),
    done('stream', 'text only', streamed(answer('the answer'))),
    done('stream', 'two read_only calls', streamed(answer('', [read(id('r1')), read(id('r2'))]))),
    done('stream', 'one side_effecting call', streamed(answer('', [write(id('w1'))]))),
    done('stream', 'one privileged call', streamed(answer('', [privileged(id('p1'))]))),
    done('stream', 'read, privileged, write', streamed(answer('', [read(id('r1')), privileged(id('p2')), write(id('w3'))]))),
    done('stream', 'over cost', streamed(answer('', [read(id('r1'))], MAX_COST + 1))),
    failed('stream', 'provider error', new ProviderError(ErrorCode.providerError, 'upstream 500', { status: 500 })),
    failed('stream', 'provider timeout', new TimeoutError('provider took too long', 30_000)),
    done('executeTools', 'tools answered', undefined),
    failed('executeTools', 'tool host crashed', new Error('tool host crashed')),
    failed('requestApproval', 'approval request failed', new Error('log append failed')),
    { type: 'APPROVAL', variant: 'approve', toolCallId: next, approved: true },
    { type: 'APPROVAL', variant: 'deny', toolCallId: next, approved: false, reason: 'no' },
    { type: 'APPROVAL', variant: 'approve another call', toolCallId: 'somebody-else', approved: true },
    done('requestApproval', 'approval timed out', { kind: 'approval', decision: { approved: false, reason: 'approval timed out', timedOut: true } }),
    { type: 'CANCEL', variant: 'cancel' },
  ];
}

// The graph API is typed with the machine's own events; the actor and timer events are internal to XState.
function toTurnEvents(events: readonly ModelEvent[]): TurnEvent[] {
  return events as unknown as TurnEvent[];
}
function fromTurnEvent(event: TurnEvent): ModelEvent {
  return event as unknown as ModelEvent;
}

const isTerminal = (snapshot: TurnSnapshot) => TERMINAL.has(String(snapshot.value));

/*
 * The traversal stops at terminal states. A live actor that reached one is done and drops every event
 * (checked on the replay below), but XState's pure `transition()` does not look at `status`, and the
 * turn's CANCEL handler sits on the root, so without `stopWhen` the graph would walk Yielding → Cancelled.
 */
function traversal(input: TurnInput) {
  return { input, events: (snapshot: TurnSnapshot) => toTurnEvents(eventsFor(snapshot)), stopWhen: isTerminal };
}

interface Transcript {
  readonly asked: PlannedCall[];
  readonly uses: string[];
  readonly results: string[];
  /** Run states in order, one per step of the path. */
  readonly states: string[];
}

/**
 * Plays a path into a transcript the way the runtime writes it: the calls in a stream's result are asked;
 * entering ToolExecution starts `nextBatch(pending)` (a `tool.use` each); executeTools finishing gives each a
 * `tool.result`; once the turn has ended, `closeTranscript` answers the rest.
 */
function transcriptOf(path: TurnPath, initiallyAsked: readonly PlannedCall[]): Transcript {
  const asked: PlannedCall[] = [...initiallyAsked];
  const uses: string[] = [];
  const results: string[] = [];
  const states: string[] = [];
  let inFlight: PlannedCall[] = [];
  let previous: TurnSnapshot | undefined;
  for (const { state, event: turnEvent } of path.steps) {
    const event = fromTurnEvent(turnEvent);
    if (previous && isTerminal(previous)) {
      throw new Error(`${event.variant} followed the terminal state ${String(previous.value)}`);
    }
    if (event.type === 'xstate.done.actor.stream') asked.push(...(event.output as StreamOutput).toolCalls);
    if (event.type === 'xstate.done.actor.executeTools') {
      results.push(...inFlight.map((call) => call.id));
      inFlight = [];
    }
    const entersTools =
      state.value === RunState.toolExecution &&
      (previous === undefined || previous.value !== RunState.toolExecution || event.type === 'xstate.done.actor.executeTools');
    if (entersTools) {
      if (states.includes(RunState.cancelled)) throw new Error('a tool started after Cancelled');
      inFlight = nextBatch(state.context.pending);
      uses.push(...inFlight.map((call) => call.id));
    }
    states.push(String(state.value));
    previous = state;
  }
  if (previous && isTerminal(previous)) {
    results.push(...closeTranscript(asked, new Set(results)).map((open) => open.toolCallId));
  }
  return { asked, uses, results, states };
}

/** The invariants a path breaks, as sentences; empty when it keeps them all. */
function violationsOf(path: TurnPath, initiallyAsked: readonly PlannedCall[]): string[] {
  const problems: string[] = [];
  let transcript: Transcript;
  try {
    transcript = transcriptOf(path, initiallyAsked);
  } catch (error) {
    return [(error as Error).message];
  }
  const askedIds = transcript.asked.map((call) => call.id);
  const count = (values: readonly string[], id: string) => values.filter((value) => value === id).length;

  if (!isTerminal(path.state)) problems.push(`ends in ${String(path.state.value)}, which is not terminal`);
  const terminals = transcript.states.filter((state) => TERMINAL.has(state));
  if (terminals.length !== 1) problems.push(`passes ${terminals.length} terminal states`);
  if (path.state.status !== 'done') problems.push(`ends with status ${path.state.status}`);
  const reason = path.state.output?.reason;
  if (!reason || !END_REASON[String(path.state.value)]?.includes(reason)) {
    problems.push(`ends in ${String(path.state.value)} with reason ${String(reason)}`);
  }
  if (new Set(transcript.uses).size !== transcript.uses.length) problems.push('starts a tool call twice');
  for (const id of [...transcript.uses, ...transcript.results]) {
    if (!askedIds.includes(id)) problems.push(`has a tool.use or tool.result for ${id}, which nobody asked for`);
  }
  for (const id of askedIds) {
    if (count(transcript.results, id) !== 1) problems.push(`gives ${id} ${count(transcript.results, id)} results`);
  }
  for (const id of transcript.uses) {
    if (!transcript.results.includes(id)) problems.push(`leaves the tool.use of ${id} without a result`);
  }
  return problems;
}

function describePath(path: TurnPath): string {
  return path.steps.map((step) => fromTurnEvent(step.event).variant ?? step.event.type).join(' → ');
}

/** Every invariant broken on any path, with the path that broke it (the first 20). */
function brokenInvariants(paths: readonly TurnPath[], initiallyAsked: readonly PlannedCall[]): string[] {
  const broken: string[] = [];
  for (const path of paths) {
    for (const problem of violationsOf(path, initiallyAsked)) broken.push(`${describePath(path)}: ${problem}`);
    if (broken.length >= 20) break;
  }
  return broken;
}

function terminalValues(paths: readonly TurnPath[]): Set<string> {
  return new Set(paths.filter((path) => isTerminal(path.state)).map((path) => String(path.state.value)));
}


// The map is keyed by branded strings, which `Object.values` does not see through.
function edgesOf(node: TurnNode): { event: TurnEvent; state: TurnSnapshot }[] {
  return Object.values(node.transitions);
}

/**
 * Every path from the initial state to a state with nowhere else to go, in the step shape of
 * `getSimplePaths`. Events that leave the snapshot as it is (ignored events) are not steps. Walked by hand
 * over `getAdjacencyMap` because `getSimplePaths` runs one depth-first search per target state, which
 * for the ~900 states here takes minutes; a cycle would make this throw rather than loop.
 */
function everyPath(adjacency: TurnAdjacency, visit: (path: TurnPath) => void): void {
  const [initialKey] = Object.keys(adjacency);
  const initial = initialKey === undefined ? undefined : adjacency[initialKey as keyof TurnAdjacency];
  if (!initialKey || !initial) throw new Error('empty adjacency map');
  const steps: TurnPath['steps'] = [{ state: initial.state, event: { type: 'xstate.init' } as unknown as TurnEvent }];
  const onPath = new Set<string>([initialKey]);
  const walk = (key: string) => {
    const node = adjacency[key as keyof TurnAdjacency];
    if (!node) throw new Error(`no adjacency entry for ${key}`);
    let moved = false;
    for (const { event, state } of edgesOf(node)) {
      const nextKey = serializeSnapshot(state);
      if (nextKey === key) continue;
      if (onPath.has(nextKey)) throw new Error(`cycle through ${nextKey}`);
      moved = true;
      steps.push({ state, event });
      onPath.add(nextKey);
      walk(nextKey);
      onPath.delete(nextKey);
      steps.pop();
    }
    if (!moved) visit({ state: node.state, steps: [...steps], weight: steps.length - 1 });
  };
  walk(initialKey);
}

function modelOf(input: TurnInput) {
  const adjacency = getAdjacencyMap(turnMachine, traversal(input));
  const paths: TurnPath[] = [];
  everyPath(adjacency, (path) => paths.push(path));
  return { adjacency, paths };
}

describe('turn machine model: every path of a fresh turn (maxSteps 2)', () => {
  const { adjacency, paths } = modelOf(BASE_INPUT);

  it('finds enough states and paths to be meaningful, ending in every terminal state', () => {
    // About 220: a step's approval decisions are dropped when the next step starts, so states of step 2 no longer
    // differ by what was decided in step 1 (they did, about 600, before that fix).
    expect(Object.keys(adjacency).length).toBeGreaterThan(200);
    expect(paths.length).toBeGreaterThan(5000);
    expect(terminalValues(paths)).toEqual(TERMINAL);
  });

  it('ends every path in exactly one terminal state, starts no tool after Cancelled and answers every tool call once', () => {
    expect(brokenInvariants(paths, [])).toEqual([]);
  });

  it('applies every representative event somewhere, so none is silently never taken', () => {
    const taken = new Set<string>();
    for (const { state, transitions } of Object.values(adjacency)) {
      for (const { event, state: next } of edgesOf({ state, transitions })) {
        if (serializeSnapshot(next) !== serializeSnapshot(state)) taken.add(fromTurnEvent(event).variant);
      }
    }
    const offered = eventsFor(getInitialSnapshot(turnMachine, BASE_INPUT))
      .map((event) => event.variant)
      .filter((variant) => variant !== 'approve another call');
    expect(offered.filter((variant) => !taken.has(variant))).toEqual([]);
  });

  it('reaches every run state and ends with steps counted: BudgetExceeded by steps only at maxSteps', () => {
    const seen = new Set<string>();
    for (const path of paths) for (const { state } of path.steps) seen.add(String(state.value));
    expect([...seen].sort()).toEqual(Object.values(RunState).sort());
    for (const path of paths) {
      const output = path.state.output;
      expect(output?.steps).toBe(path.state.context.step);
      expect(output?.steps).toBeLessThanOrEqual(BASE_INPUT.maxSteps);
      if (output?.reason === TurnEndReason.budgetExceeded && path.state.context.cost <= MAX_COST) {
        expect(output.steps).toBe(BASE_INPUT.maxSteps);
      }
    }
  });

  it('moves every non-terminal state to Cancelled on CANCEL', () => {
    let checked = 0;
    for (const { state } of Object.values(adjacency)) {
      if (isTerminal(state)) continue;
      const [cancelled] = transition(turnMachine, state, { type: 'CANCEL' });
      expect(cancelled.value).toBe(RunState.cancelled);
      expect(cancelled.output?.reason).toBe(TurnEndReason.cancelled);
      expect(cancelled.status).toBe('done');
      checked += 1;
    }
    expect(checked).toBeGreaterThan(60);
  });

  it('ignores an APPROVAL for another call: the state stays as it is', () => {
    let checked = 0;
    for (const { state, transitions } of Object.values(adjacency)) {
      for (const { event, state: next } of edgesOf({ state, transitions })) {
        if (fromTurnEvent(event).variant !== 'approve another call') continue;
        expect(serializeSnapshot(next)).toBe(serializeSnapshot(state));
        checked += 1;
      }
    }
    expect(checked).toBeGreaterThan(0);
  });
});

describe('turn machine model: every path of a resumed turn', () => {
  const pendingCalls = [privileged('s0-p1'), read('s0-r2'), write('s0-w3')];
  const input: TurnInput = { ...BASE_INPUT, resume: { step: 1, pendingCalls, decisions: {}, usage: ZERO_USAGE, cost: 0 } };
  const { paths } = modelOf(input);

  it('starts in AwaitingApproval and keeps the invariants on every path, counting the resumed calls as asked', () => {
    expect(paths.length).toBeGreaterThan(100);
    expect(terminalValues(paths)).toEqual(TERMINAL);
    expect(brokenInvariants(paths, pendingCalls)).toEqual([]);
    for (const path of paths) expect(transcriptOf(path, pendingCalls).states[0]).toBe(RunState.awaitingApproval);
  });
});

/** Fakes whose every call waits until the replay settles it, as the path's next event says. */
function createReplayActor(input: TurnInput) {
  const clock = new SimulatedClock();
  const open = new Map<string, Deferred<unknown>>();
  const toolBatches: string[][] = [];
  const gate = <T>(id: string, signal: AbortSignal): Promise<T> => {
    const settleLater = deferred<unknown>();
    open.set(id, settleLater);
    return Promise.race([settleLater.promise as Promise<T>, untilAborted<T>(signal)]);
  };
  const machine = turnMachine.provide({
    actors: {
      prepare: fromPromise(({ signal }) => gate<PrepareOutput>('prepare', signal)),
      compact: fromPromise(({ signal }) => gate<CompactOutput>('compact', signal)),
      stream: fromPromise(({ signal }) => gate<StreamOutput>('stream', signal)),
      executeTools: fromPromise(({ input: toolsInput, signal }) => {
        toolBatches.push(toolsInput.calls.map((call) => call.id));
        return gate<void>('executeTools', signal);
      }),
      requestApproval: fromPromise(({ signal }) => gate<void>('requestApproval', signal)),
    },
  });
  const actor = createActor(machine, { input, clock });
  return { actor, clock, open, toolBatches };
}

/** One macrotask: enough for a settled fake to reach the actor, as everything on the way is a microtask. */
function tick(): Promise<void> {
  return new Promise<void>((resolve) => setImmediate(resolve));
}

async function replay(path: TurnPath, input: TurnInput, initiallyAsked: readonly PlannedCall[]) {
  const { actor, clock, open, toolBatches } = createReplayActor(input);
  actor.start();
  await tick();
  for (const { state: expected, event: turnEvent } of path.steps.slice(1)) {
    const event = fromTurnEvent(turnEvent);
    const [, kind, , id] = event.type.split('.');
    if (kind === 'done' || kind === 'error') {
      const pending = open.get(id ?? '');
      if (!pending) throw new Error(`replay of ${describePath(path)}: ${event.variant} but ${id} is not running`);
      open.delete(id ?? '');
      if (kind === 'done') pending.resolve(event.output);
      else pending.reject(event.error);
    } else {
      actor.send(turnEvent);
    }
    await tick();
    const live = actor.getSnapshot();
    expect(serializeSnapshot(live), describePath(path)).toBe(serializeSnapshot(expected));
  }
  if (isTerminal(path.state)) {
    // Nothing follows a terminal state: a finished actor drops CANCEL, APPROVAL and timers alike.
    const before = actor.getSnapshot();
    actor.send({ type: 'CANCEL' });
    actor.send({ type: 'APPROVAL', toolCallId: path.state.context.pending[0]?.id ?? 'none', approved: true });
    clock.increment(10 * 60_000);
    await tick();
    expect(actor.getSnapshot()).toBe(before);
    expect(before.status).toBe('done');
  }
  const transcript = transcriptOf(path, initiallyAsked);
  expect(toolBatches.flat()).toEqual(transcript.uses);
  actor.stop();
}

describe('turn machine model: replaying the shortest path to every state on a live actor', () => {
  // XState warns about each event sent to a finished actor; here that is the behaviour under test.
  beforeAll(() => {
    vi.spyOn(console, 'warn').mockImplementation(() => {});
  });
  afterAll(() => {
    vi.restoreAllMocks();
  });

  it('reaches the same state and context, and starts the same tool batches, as the model says (fresh turn)', async () => {
    const paths = getShortestPaths(turnMachine, traversal(BASE_INPUT));
    expect(paths.length).toBeGreaterThan(50);
    for (const path of paths) await replay(path, BASE_INPUT, []);
  }, 60_000);

  it('reaches the same state and context as the model says (resumed turn)', async () => {
    const pendingCalls = [read('s0-r1'), privileged('s0-p2')];
    const input: TurnInput = { ...BASE_INPUT, resume: { step: 2, pendingCalls, decisions: {}, usage: ZERO_USAGE, cost: 0 } };
    const paths = getShortestPaths(turnMachine, traversal(input));
    expect(paths.length).toBeGreaterThan(10);
    for (const path of paths) await replay(path, input, pendingCalls);
  }, 60_000);
});
