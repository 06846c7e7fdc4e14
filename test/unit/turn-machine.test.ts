import { describe, expect, it, vi } from 'vitest';
import { SimulatedClock, createActor, toPromise, waitFor } from 'xstate';
import { turnMachine } from '../../machines/turn.ts';
import type { StreamOutput, TurnInput, TurnOutput } from '../../machines/turn.ts';
import { AgentbusError, DeadlineExceededError, ProviderError, TimeoutError } from '../../src/errors.ts';
import { ErrorCode, RunState, TurnEndReason } from '../../src/protocol/index.ts';
import {
  REQUEST,
  answer,
  createTurnFakes,
  deferred,
  privileged,
  read,
  settle,
  streamOf,
  unknownTool,
  untilAborted,
  write,
} from '../helpers/turn-fakes.ts';
import type { TurnFakes } from '../helpers/turn-fakes.ts';

interface StartOptions {
  readonly clock?: SimulatedClock;
}

/** Starts a turn on the fakes and records every run state it rests in, in order. */
function startTurn(fakes: TurnFakes, input: Partial<TurnInput> = {}, options: StartOptions = {}) {
  const machine = turnMachine.provide({ actors: fakes.actors });
  const actor = createActor(machine, {
    input: { turnId: 'turn-1', model: 'scripted:default', maxSteps: 8, ...input },
    ...(options.clock ? { clock: options.clock } : {}),
  });
  const states: string[] = [];
  actor.subscribe((snapshot) => {
    const value = String(snapshot.value);
    if (states.at(-1) !== value) states.push(value);
  });
  const done: Promise<TurnOutput> = toPromise(actor);
  actor.start();
  return { actor, states, done };
}

type TurnActor = ReturnType<typeof startTurn>['actor'];

function inState(actor: TurnActor, state: RunState) {
  return waitFor(actor, (snapshot) => snapshot.matches(state));
}

describe('turn machine: context', () => {
  it('keeps what the turn was started with in one field, so that each assign copies few (at most 16 own fields)', async () => {
    const fakes = createTurnFakes({ stream: streamOf(answer('the answer', [], 0.25)) });
    const { actor, done } = startTurn(fakes, { maxCost: 1, deadline: 1_000, timeLeftMs: 500 });
    const context = actor.getSnapshot().context;
    await done;
    // XState copies the context whole into a new object (Object.assign onto {}) at every assign, a dozen times per
    // turn: from 20 fields on, V8 (Node 20) makes that copy a slow dictionary object, which cost a fifth of the
    // machines' CPU per session. 16 leaves room for a few more.
    expect(Object.keys(context).length).toBeLessThanOrEqual(16);
    expect(context.turn).toMatchObject({ turnId: 'turn-1', model: 'scripted:default', maxSteps: 8, maxCost: 1, deadline: 1_000, timeLeftMs: 500 });
  });
});

describe('turn machine: steps', () => {
  it('yields the streamed text with the usage and cost of its single step', async () => {
    const fakes = createTurnFakes({ stream: streamOf(answer('the answer', [], 0.25)) });
    const { states, done } = startTurn(fakes);

    const output = await done;

    expect(output).toEqual({
      reason: TurnEndReason.yielded,
      text: 'the answer',
      usage: { inputTokens: 10, outputTokens: 5 },
      cost: 0.25,
      steps: 1,
    });
    expect(states).toEqual([RunState.preparing, RunState.streaming, RunState.yielding]);
    expect(fakes.calls.executeTools).toHaveLength(0);
    expect(fakes.calls.stream[0]?.input).toMatchObject({ turnId: 'turn-1', step: 1, maxSteps: 8, request: { model: 'scripted:default' } });
  });

  it('runs a tool step then a text step, summing usage and cost over both provider calls', async () => {
    const fakes = createTurnFakes({ stream: streamOf(answer('', [read('a')], 0.1), answer('done', [], 0.2)) });
    const { states, done } = startTurn(fakes);

    const output = await done;

    expect(states).toEqual([
      RunState.preparing,
      RunState.streaming,
      RunState.toolExecution,
      RunState.preparing,
      RunState.streaming,
      RunState.yielding,
    ]);
    expect(output.reason).toBe(TurnEndReason.yielded);
    expect(output.text).toBe('done');
    expect(output.steps).toBe(2);
    expect(output.usage).toEqual({ inputTokens: 20, outputTokens: 10 });
    expect(output.cost).toBeCloseTo(0.3);
    expect(fakes.calls.prepare.map((call) => call.input.step)).toEqual([1, 2]);
    expect(fakes.calls.stream.map((call) => call.input.step)).toEqual([1, 2]);
    expect(fakes.calls.executeTools[0]?.input).toMatchObject({ step: 1, calls: [read('a')], decisions: {} });
  });

  it('runs contiguous read_only calls in one batch and each side_effecting call alone, in the order asked', async () => {
    let running = 0;
    let mostAtOnce = 0;
    const fakes = createTurnFakes({
      stream: streamOf(answer('', [read('r1'), read('r2'), write('w3'), read('r4'), unknownTool('u5'), write('w6'), write('w7')]), answer('ok')),
      executeTools: async () => {
        running += 1;
        mostAtOnce = Math.max(mostAtOnce, running);
        await settle();
        running -= 1;
      },
    });

    const output = await startTurn(fakes).done;

    expect(output.reason).toBe(TurnEndReason.yielded);
    expect(fakes.log.filter((entry) => entry.startsWith('executeTools'))).toEqual([
      'executeTools:r1,r2',
      'executeTools:w3',
      'executeTools:r4,u5',
      'executeTools:w6',
      'executeTools:w7',
    ]);
    expect(mostAtOnce).toBe(1);
    expect(fakes.calls.stream).toHaveLength(2);
  });

  it('fails with the error as data when executeTools itself rejects', async () => {
    const fakes = createTurnFakes({
      stream: streamOf(answer('', [write('w1')])),
      executeTools: () => Promise.reject(new AgentbusError(ErrorCode.internal, 'tool host crashed')),
    });

    const output = await startTurn(fakes).done;

    expect(output.reason).toBe(TurnEndReason.failed);
    expect(output.error).toEqual({ code: ErrorCode.internal, message: 'tool host crashed', retryable: false });
  });
});

describe('turn machine: approval of privileged calls', () => {
  it('waits in AwaitingApproval for a privileged call and runs it once approved', async () => {
    const fakes = createTurnFakes({ stream: streamOf(answer('', [privileged('p1')]), answer('done')) });
    const { actor, states, done } = startTurn(fakes);

    await inState(actor, RunState.awaitingApproval);
    await settle();
    expect(fakes.calls.requestApproval.map((call) => call.input.call.id)).toEqual(['p1']);
    expect(fakes.calls.executeTools).toHaveLength(0);

    actor.send({ type: 'APPROVAL', toolCallId: 'p1', approved: true });
    const output = await done;

    expect(output.reason).toBe(TurnEndReason.yielded);
    expect(states.slice(0, 4)).toEqual([RunState.preparing, RunState.streaming, RunState.awaitingApproval, RunState.toolExecution]);
    expect(fakes.calls.executeTools[0]?.input).toMatchObject({ calls: [privileged('p1')], decisions: { p1: { approved: true } } });
  });

  it('passes a denial with its reason to executeTools, which answers the call instead of running it', async () => {
    const fakes = createTurnFakes({ stream: streamOf(answer('', [privileged('p1')]), answer('done')) });
    const { actor, done } = startTurn(fakes);

    await inState(actor, RunState.awaitingApproval);
    actor.send({ type: 'APPROVAL', toolCallId: 'p1', approved: false, reason: 'not on a Friday' });
    await done;

    expect(fakes.calls.executeTools[0]?.input.decisions).toEqual({ p1: { approved: false, reason: 'not on a Friday' } });
  });

  it('takes the default decision requestApproval resolves with when the approval deadline passes', async () => {
    const timedOut = { approved: false, reason: 'approval timed out', timedOut: true };
    const fakes = createTurnFakes({
      stream: streamOf(answer('', [privileged('p1')]), answer('done')),
      requestApproval: () => ({ kind: 'approval', decision: timedOut }),
    });
    const { done } = startTurn(fakes);
    const output = await done;

    expect(output.reason).toBe(TurnEndReason.yielded);
    expect(fakes.calls.executeTools[0]?.input).toMatchObject({ calls: [privileged('p1')], decisions: { p1: timedOut } });
  });

  it('keeps waiting when requestApproval only asked (resolved without a decision)', async () => {
    const fakes = createTurnFakes({ stream: streamOf(answer('', [privileged('p1')]), answer('done')) });
    const { actor, done } = startTurn(fakes);

    await inState(actor, RunState.awaitingApproval);
    await settle();
    expect(actor.getSnapshot().value).toBe(RunState.awaitingApproval);
    actor.send({ type: 'APPROVAL', toolCallId: 'p1', approved: true });
    await done;
    expect(fakes.log).toContain('executeTools:p1');
  });

  it('passes edited args and a respond decision to executeTools as the decision of each call', async () => {
    const fakes = createTurnFakes({ stream: streamOf(answer('', [privileged('p1'), privileged('p2')]), answer('done')) });
    const { actor, done } = startTurn(fakes);

    await inState(actor, RunState.awaitingApproval);
    actor.send({ type: 'APPROVAL', toolCallId: 'p1', approved: true, args: { target: 'staging' } });
    await inState(actor, RunState.awaitingApproval);
    await settle();
    actor.send({ type: 'APPROVAL', toolCallId: 'p2', approved: false, respond: 'done by hand' });
    await done;

    expect(fakes.calls.executeTools.at(-1)?.input.decisions).toEqual({
      p1: { approved: true, args: { target: 'staging' } },
      p2: { approved: false, respond: 'done by hand' },
    });
  });

  it('suspends a call that asked the user something in AwaitingApproval, then runs it again with the answer', async () => {
    const asking = { requestId: 'w1:1', question: 'Which branch?' };
    let runs = 0;
    const fakes = createTurnFakes({
      stream: streamOf(answer('', [write('w1')]), answer('done')),
      executeTools: () => {
        runs += 1;
        return runs === 1 ? { suspended: [{ id: 'w1', asking, effectId: 'e-w1', sent: { args: {} } }] } : undefined;
      },
    });
    const { actor, done, states } = startTurn(fakes);

    await inState(actor, RunState.awaitingApproval);
    expect(fakes.calls.requestApproval[0]?.input.call).toMatchObject({ id: 'w1', asking });
    actor.send({ type: 'INPUT', toolCallId: 'w1', requestId: 'w1:2', answer: 'wrong request' });
    await settle();
    expect(actor.getSnapshot().value).toBe(RunState.awaitingApproval);
    actor.send({ type: 'INPUT', toolCallId: 'w1', requestId: 'w1:1', answer: 'main' });
    const output = await done;

    expect(output.reason).toBe(TurnEndReason.yielded);
    expect(states).toEqual([RunState.preparing, RunState.streaming, RunState.toolExecution, RunState.awaitingApproval, RunState.toolExecution, RunState.preparing, RunState.streaming, RunState.yielding]);
    const again = fakes.calls.executeTools[1]?.input.calls[0];
    expect(again).toMatchObject({ id: 'w1', effectId: 'e-w1', sent: { args: {} }, inputs: [{ requestId: 'w1:1', question: 'Which branch?', answer: 'main' }] });
    expect(again?.asking).toBeUndefined();
  });

  it('asks for each suspended call of a batch before the batch runs again', async () => {
    const fakes = createTurnFakes({
      stream: streamOf(answer('', [read('r1'), read('r2')]), answer('done')),
      executeTools: (input) =>
        input.calls.some((call) => call.inputs)
          ? undefined
          : { suspended: input.calls.map((call) => ({ id: call.id, asking: { requestId: `${call.id}:1`, question: `${call.id}?` }, effectId: `e-${call.id}`, sent: { args: {} } })) },
    });
    const { actor, done } = startTurn(fakes);

    await inState(actor, RunState.awaitingApproval);
    actor.send({ type: 'INPUT', toolCallId: 'r1', requestId: 'r1:1', answer: 1 });
    await settle();
    expect(fakes.calls.requestApproval.map((call) => call.input.call.id)).toEqual(['r1', 'r2']);
    expect(fakes.calls.executeTools).toHaveLength(1);
    actor.send({ type: 'INPUT', toolCallId: 'r2', requestId: 'r2:1', answer: 2 });
    await done;

    expect(fakes.calls.executeTools[1]?.input.calls.map((call) => [call.id, call.inputs?.[0]?.answer])).toEqual([
      ['r1', 1],
      ['r2', 2],
    ]);
  });

  it('runs a call whose question timed out once more, marked inputTimedOut, so that it gets its error result', async () => {
    let runs = 0;
    const fakes = createTurnFakes({
      stream: streamOf(answer('', [write('w1')]), answer('done')),
      executeTools: () => {
        runs += 1;
        return runs === 1 ? { suspended: [{ id: 'w1', asking: { requestId: 'w1:1', question: 'Sure?' }, effectId: 'e-w1', sent: { args: {} } }] } : undefined;
      },
      requestApproval: () => ({ kind: 'input_timeout', requestId: 'w1:1' }),
    });
    await startTurn(fakes).done;

    expect(fakes.calls.executeTools[1]?.input.calls[0]).toMatchObject({ id: 'w1', inputTimedOut: { requestId: 'w1:1', question: 'Sure?' } });
  });

  it('cancels a turn waiting for an answer, aborting the wait', async () => {
    const fakes = createTurnFakes({
      stream: streamOf(answer('', [write('w1')])),
      executeTools: () => ({ suspended: [{ id: 'w1', asking: { requestId: 'w1:1', question: 'Sure?' }, effectId: 'e-w1', sent: { args: {} } }] }),
      requestApproval: (_input, signal) => untilAborted(signal),
    });
    const { actor, done } = startTurn(fakes);

    await inState(actor, RunState.awaitingApproval);
    actor.send({ type: 'CANCEL' });
    const output = await done;

    expect(output.reason).toBe(TurnEndReason.cancelled);
    expect(fakes.calls.requestApproval[0]?.signal.aborted).toBe(true);
  });

  it('ignores an APPROVAL for another toolCallId and keeps waiting', async () => {
    const fakes = createTurnFakes({ stream: streamOf(answer('', [privileged('p1')]), answer('done')) });
    const { actor, done } = startTurn(fakes);

    await inState(actor, RunState.awaitingApproval);
    actor.send({ type: 'APPROVAL', toolCallId: 'someone-else', approved: true });
    await settle();
    expect(actor.getSnapshot().value).toBe(RunState.awaitingApproval);
    expect(fakes.calls.executeTools).toHaveLength(0);

    actor.send({ type: 'APPROVAL', toolCallId: 'p1', approved: true });
    expect((await done).reason).toBe(TurnEndReason.yielded);
  });

  it('runs the read_only calls before a privileged call first, then asks for approval of it', async () => {
    const fakes = createTurnFakes({ stream: streamOf(answer('', [read('r1'), privileged('p2'), read('r3')]), answer('done')) });
    const { actor, done } = startTurn(fakes);

    await inState(actor, RunState.awaitingApproval);
    expect(fakes.log.filter((entry) => entry.startsWith('executeTools'))).toEqual(['executeTools:r1']);

    actor.send({ type: 'APPROVAL', toolCallId: 'p2', approved: true });
    await done;

    expect(fakes.log.filter((entry) => entry.startsWith('executeTools') || entry.startsWith('requestApproval'))).toEqual([
      'executeTools:r1',
      'requestApproval:p2',
      'executeTools:p2',
      'executeTools:r3',
    ]);
  });

  it('asks again for each privileged call in turn', async () => {
    const fakes = createTurnFakes({ stream: streamOf(answer('', [privileged('p1'), privileged('p2')]), answer('done')) });
    const { actor, done } = startTurn(fakes);

    await inState(actor, RunState.awaitingApproval);
    actor.send({ type: 'APPROVAL', toolCallId: 'p1', approved: true });
    await waitFor(actor, () => fakes.calls.requestApproval.length === 2);
    expect(actor.getSnapshot().value).toBe(RunState.awaitingApproval);
    actor.send({ type: 'APPROVAL', toolCallId: 'p2', approved: false });
    await done;

    expect(fakes.calls.executeTools.map((call) => call.input.calls.map((c) => c.id))).toEqual([['p1'], ['p2']]);
    expect(fakes.calls.executeTools[1]?.input.decisions).toEqual({ p1: { approved: true }, p2: { approved: false } });
  });

  it('asks again in the next step for a privileged call that reuses the id of one approved in the step before', async () => {
    // Models served by OpenAI-compatible local servers name their calls `call_0` in every response.
    const fakes = createTurnFakes({ stream: streamOf(answer('', [privileged('call_0')]), answer('', [privileged('call_0')]), answer('done')) });
    const { actor, done } = startTurn(fakes);

    await inState(actor, RunState.awaitingApproval);
    actor.send({ type: 'APPROVAL', toolCallId: 'call_0', approved: true });
    await waitFor(actor, () => fakes.calls.requestApproval.length === 2);
    await settle();
    expect(actor.getSnapshot().value).toBe(RunState.awaitingApproval);
    expect(fakes.calls.executeTools).toHaveLength(1);

    actor.send({ type: 'APPROVAL', toolCallId: 'call_0', approved: false, reason: 'not twice' });
    expect((await done).reason).toBe(TurnEndReason.yielded);
    expect(fakes.calls.executeTools.map((call) => [call.input.step, call.input.decisions])).toEqual([
      [1, { call_0: { approved: true } }],
      [2, { call_0: { approved: false, reason: 'not twice' } }],
    ]);
  });

  it('does not carry a denial over to the next step\'s call of the same id', async () => {
    const fakes = createTurnFakes({ stream: streamOf(answer('', [privileged('call_0')]), answer('', [privileged('call_0')]), answer('done')) });
    const { actor, done } = startTurn(fakes);

    await inState(actor, RunState.awaitingApproval);
    actor.send({ type: 'APPROVAL', toolCallId: 'call_0', approved: false });
    await waitFor(actor, () => fakes.calls.requestApproval.length === 2);
    actor.send({ type: 'APPROVAL', toolCallId: 'call_0', approved: true });
    await done;

    expect(fakes.calls.executeTools[1]?.input.decisions).toEqual({ call_0: { approved: true } });
  });
});

describe('turn machine: deadline', () => {
  it('ends deadline_exceeded when its time runs out mid tool call, aborting the call', async () => {
    const clock = new SimulatedClock();
    const fakes = createTurnFakes({ stream: streamOf(answer('', [read('slow')])), executeTools: (_input, signal) => untilAborted(signal) });
    const { actor, states, done } = startTurn(fakes, { timeLeftMs: 5000, deadline: Date.UTC(2026, 0, 1) }, { clock });

    await inState(actor, RunState.toolExecution);
    clock.increment(4999);
    expect(actor.getSnapshot().value).toBe(RunState.toolExecution);
    clock.increment(1);
    const output = await done;

    expect(output).toMatchObject({ reason: TurnEndReason.deadlineExceeded, error: { code: ErrorCode.deadlineExceeded, retryable: false } });
    expect(output.error?.message).toContain('2026-01-01T00:00:00.000Z');
    expect(fakes.calls.executeTools[0]?.signal.aborted).toBe(true);
    expect(states.at(-1)).toBe(RunState.failed);
  });

  it('ends at once when a resumed turn has no time left, before any provider call', async () => {
    const fakes = createTurnFakes({ stream: (_input, signal) => untilAborted(signal) });

    const output = await startTurn(fakes, { timeLeftMs: 0 }).done;

    expect(output.reason).toBe(TurnEndReason.deadlineExceeded);
  });

  it('ends deadline_exceeded, not failed, when a step refuses to begin past the deadline (its timer not yet fired)', async () => {
    const fakes = createTurnFakes({
      stream: streamOf(answer('', [read('quick')]), answer('too late')),
      prepare: (input) => {
        if (input.step > 1) throw new DeadlineExceededError('the turn passed its deadline before step 2 began');
        return { needsCompaction: false, request: REQUEST };
      },
    });

    const output = await startTurn(fakes, { timeLeftMs: 60_000, deadline: Date.UTC(2026, 0, 1) }).done;

    expect(output).toMatchObject({ reason: TurnEndReason.deadlineExceeded, error: { code: ErrorCode.deadlineExceeded } });
    expect(fakes.calls.stream).toHaveLength(1);
  });

  it('has no deadline without timeLeftMs', async () => {
    const clock = new SimulatedClock();
    const release = deferred<StreamOutput>();
    const fakes = createTurnFakes({ stream: () => release.promise });
    const { actor, done } = startTurn(fakes, {}, { clock });

    await inState(actor, RunState.streaming);
    clock.increment(2 ** 31);
    expect(actor.getSnapshot().value).toBe(RunState.streaming);
    release.resolve(answer('late but fine'));

    expect((await done).reason).toBe(TurnEndReason.yielded);
  });
});

describe('turn machine: compaction', () => {
  it('counts the summary call in the turn usage and cost, and ends BudgetExceeded when it passes maxCost', async () => {
    const fakes = createTurnFakes({
      prepare: (input) => ({ needsCompaction: !input.compacted, request: { model: 'm', messages: [], tools: [] } }),
      compact: () => ({ usage: { inputTokens: 100, outputTokens: 20 }, cost: 0.5 }),
      stream: streamOf(answer('done', [], 0.25)),
    });

    const counted = await startTurn(fakes).done;
    expect(counted).toMatchObject({ reason: TurnEndReason.yielded, usage: { inputTokens: 110, outputTokens: 25 }, cost: 0.75 });

    const over = createTurnFakes({
      prepare: (input) => ({ needsCompaction: !input.compacted, request: { model: 'm', messages: [], tools: [] } }),
      compact: () => ({ usage: { inputTokens: 100, outputTokens: 20 }, cost: 0.5 }),
    });
    const stopped = await startTurn(over, { maxCost: 0.4 }).done;
    expect(stopped).toMatchObject({ reason: TurnEndReason.budgetExceeded, cost: 0.5 });
    expect(over.calls.stream).toHaveLength(0);
  });

  it('compacts when prepare says the context needs it, then prepares again with compacted: true and streams', async () => {
    const fakes = createTurnFakes({ prepare: () => ({ needsCompaction: true, request: { model: 'm', messages: [], tools: [] } }) });
    const { states, done } = startTurn(fakes);

    const output = await done;

    expect(output.reason).toBe(TurnEndReason.yielded);
    expect(states).toEqual([RunState.preparing, RunState.compacting, RunState.preparing, RunState.streaming, RunState.yielding]);
    expect(fakes.calls.prepare.map((call) => call.input.compacted)).toEqual([false, true]);
    expect(fakes.calls.compact).toHaveLength(1);
    expect(fakes.calls.stream[0]?.input.request.model).toBe('m');
  });

  it('goes on preparing when compaction fails', async () => {
    const fakes = createTurnFakes({
      prepare: (input) => ({ needsCompaction: !input.compacted, request: { model: 'm', messages: [], tools: [] } }),
      compact: () => Promise.reject(new Error('summary model down')),
    });
    const { states, done } = startTurn(fakes);

    expect((await done).reason).toBe(TurnEndReason.yielded);
    expect(states).toEqual([RunState.preparing, RunState.compacting, RunState.preparing, RunState.streaming, RunState.yielding]);
  });

  it('may compact again in the next step', async () => {
    const fakes = createTurnFakes({
      prepare: () => ({ needsCompaction: true, request: { model: 'm', messages: [], tools: [] } }),
      stream: streamOf(answer('', [read('a')]), answer('done')),
    });

    await startTurn(fakes).done;

    expect(fakes.calls.compact.map((call) => call.input.step)).toEqual([1, 2]);
    expect(fakes.calls.prepare.map((call) => [call.input.step, call.input.compacted])).toEqual([
      [1, false],
      [1, true],
      [2, false],
      [2, true],
    ]);
  });
});

describe('turn machine: budgets', () => {
  it('ends BudgetExceeded after maxSteps steps that each asked for tools, with the text of one last call made without tools', async () => {
    const fakes = createTurnFakes({ stream: (input) => answer(input.final ? 'what I found' : `step ${input.step}`, [read(`c${input.step}`)], 0.1) });
    const { states, done } = startTurn(fakes, { maxSteps: 2 });

    const output = await done;

    expect(output).toMatchObject({ reason: TurnEndReason.budgetExceeded, steps: 2, text: 'what I found', cost: 0.30000000000000004 });
    expect(fakes.calls.stream).toHaveLength(3);
    expect(fakes.calls.stream.map((call) => [call.input.step, call.input.final ?? false])).toEqual([[1, false], [2, false], [2, true]]);
    expect(fakes.calls.prepare.map((call) => call.input.final ?? false)).toEqual([false, false, true]);
    // The tool call the last answer asked for anyway is not run.
    expect(fakes.calls.executeTools).toHaveLength(2);
    expect(states.at(-1)).toBe(RunState.budgetExceeded);
  });

  it('skips the last answer when the prompt says finalAnswer: false', async () => {
    const fakes = createTurnFakes({ stream: (input) => answer(`step ${input.step}`, [read(`c${input.step}`)]) });

    const output = await startTurn(fakes, { maxSteps: 2, finalAnswer: false }).done;

    expect(output).toMatchObject({ reason: TurnEndReason.budgetExceeded, steps: 2, text: 'step 2' });
    expect(fakes.calls.stream).toHaveLength(2);
  });

  it('makes no last answer when maxCost is the budget that ran out', async () => {
    const fakes = createTurnFakes({ stream: streamOf(answer('', [read('a')], 0.6), answer('', [read('b')], 0.6)) });

    const output = await startTurn(fakes, { maxSteps: 2, maxCost: 1 }).done;

    expect(output.reason).toBe(TurnEndReason.budgetExceeded);
    expect(fakes.calls.stream).toHaveLength(2);
    expect(fakes.calls.stream.some((call) => call.input.final)).toBe(false);
  });

  it('ends BudgetExceeded when a stream takes the cost over maxCost, without running the tools it asked for', async () => {
    const fakes = createTurnFakes({ stream: streamOf(answer('', [read('a')], 0.6), answer('', [read('b')], 0.6)) });

    const output = await startTurn(fakes, { maxCost: 1 }).done;

    expect(output).toMatchObject({ reason: TurnEndReason.budgetExceeded, steps: 2 });
    expect(output.cost).toBeCloseTo(1.2);
    expect(fakes.log.filter((entry) => entry.startsWith('executeTools'))).toEqual(['executeTools:a']);
  });

  it('does not stop at a cost exactly equal to maxCost', async () => {
    const fakes = createTurnFakes({ stream: streamOf(answer('fine', [], 1)) });

    expect((await startTurn(fakes, { maxCost: 1 }).done).reason).toBe(TurnEndReason.yielded);
  });
});

describe('turn machine: errors', () => {
  it('ends Failed with the error as data when the stream rejects', async () => {
    const fakes = createTurnFakes({
      stream: () => Promise.reject(new ProviderError(ErrorCode.providerError, 'upstream 500', { status: 500, retryable: true })),
    });
    const { states, done } = startTurn(fakes);

    const output = await done;

    expect(output).toEqual({
      reason: TurnEndReason.failed,
      error: { code: ErrorCode.providerError, message: 'upstream 500', retryable: true },
      usage: { inputTokens: 0, outputTokens: 0 },
      cost: 0,
      steps: 1,
    });
    expect(states.at(-1)).toBe(RunState.failed);
  });

  it('ends Failed when prepare rejects, without calling the provider', async () => {
    const fakes = createTurnFakes({ prepare: () => Promise.reject(new Error('history unreadable')) });

    const output = await startTurn(fakes).done;

    expect(output.reason).toBe(TurnEndReason.failed);
    expect(output.error?.message).toBe('history unreadable');
    expect(fakes.calls.stream).toHaveLength(0);
  });

  it('ends with reason timeout when the stream rejects with an AgentbusError of code timeout', async () => {
    const fakes = createTurnFakes({ stream: () => Promise.reject(new TimeoutError('provider took too long', 30_000)) });

    const output = await startTurn(fakes).done;

    expect(output.reason).toBe(TurnEndReason.timeout);
    expect(output.error?.code).toBe(ErrorCode.timeout);
  });

  it('ends with reason timeout when the stream rejects with the TimeoutError of AbortSignal.timeout', async () => {
    const fakes = createTurnFakes({ stream: (_input, signal) => untilAborted(AbortSignal.any([signal, AbortSignal.timeout(5)])) });

    const output = await startTurn(fakes).done;

    expect(output.reason).toBe(TurnEndReason.timeout);
    expect(output.error?.code).toBe(ErrorCode.timeout);
  });

  it('ends with reason timeout for any Error named TimeoutError', async () => {
    const error = new Error('deadline passed');
    error.name = 'TimeoutError';
    const fakes = createTurnFakes({ stream: () => Promise.reject(error) });

    expect((await startTurn(fakes).done).reason).toBe(TurnEndReason.timeout);
  });

  it('ends Failed when the approval request cannot be made', async () => {
    const fakes = createTurnFakes({
      stream: streamOf(answer('', [privileged('p1')])),
      requestApproval: () => Promise.reject(new Error('log append failed')),
    });

    const output = await startTurn(fakes).done;

    expect(output.reason).toBe(TurnEndReason.failed);
    expect(fakes.calls.executeTools).toHaveLength(0);
  });
});

describe('turn machine: resume', () => {
  const usage = { inputTokens: 100, outputTokens: 50 };

  it('goes straight to ToolExecution with the pending calls, without preparing or streaming again', async () => {
    const fakes = createTurnFakes({ stream: streamOf(answer('done')) });
    const { states, done } = startTurn(fakes, {
      resume: { step: 3, pendingCalls: [read('r1'), write('w2')], decisions: {}, usage, cost: 0.5 },
    });

    const output = await done;

    expect(states).toEqual([RunState.toolExecution, RunState.preparing, RunState.streaming, RunState.yielding]);
    expect(fakes.log).toEqual(['executeTools:r1', 'executeTools:w2', 'prepare', 'stream']);
    expect(fakes.calls.executeTools[0]?.input.step).toBe(3);
    expect(output).toMatchObject({ steps: 4, usage: { inputTokens: 110, outputTokens: 55 } });
    expect(output.cost).toBeCloseTo(0.51);
  });

  it('goes straight to AwaitingApproval when the first pending call is privileged and undecided', async () => {
    const fakes = createTurnFakes();
    const { actor, states } = startTurn(fakes, {
      resume: { step: 1, pendingCalls: [privileged('p1')], decisions: {}, usage, cost: 0 },
    });

    await settle();

    expect(states).toEqual([RunState.awaitingApproval]);
    expect(fakes.log).toEqual(['requestApproval:p1']);
    actor.stop();
  });

  it('runs a privileged call whose decision the log already holds without asking again', async () => {
    const fakes = createTurnFakes();
    const { done } = startTurn(fakes, {
      resume: { step: 1, pendingCalls: [privileged('p1')], decisions: { p1: { approved: true } }, usage, cost: 0 },
    });

    await done;

    expect(fakes.log.slice(0, 1)).toEqual(['executeTools:p1']);
    expect(fakes.calls.requestApproval).toHaveLength(0);
  });
});

describe('turn machine: cancellation', () => {
  it('cancelled before the stream starts: the provider is never called and prepare is aborted', async () => {
    const fakes = createTurnFakes({ prepare: (_input, signal) => untilAborted(signal) });
    const { actor, done } = startTurn(fakes);

    await settle();
    actor.send({ type: 'CANCEL' });
    const output = await done;

    expect(output.reason).toBe(TurnEndReason.cancelled);
    expect(fakes.calls.prepare[0]?.signal.aborted).toBe(true);
    expect(fakes.calls.stream).toHaveLength(0);
  });

  it('cancelled before anything ran: a CANCEL sent right after start ends the turn with no provider call', async () => {
    const fakes = createTurnFakes();
    const { actor, done } = startTurn(fakes);

    actor.send({ type: 'CANCEL' });
    const output = await done;
    await settle();

    expect(output.reason).toBe(TurnEndReason.cancelled);
    expect(fakes.calls.stream).toHaveLength(0);
  });

  it('cancelled while streaming: ends Cancelled, aborts the stream signal and drops its late reply', async () => {
    const late = deferred<ReturnType<typeof answer>>();
    const fakes = createTurnFakes({ stream: () => late.promise });
    const { actor, states, done } = startTurn(fakes);

    await inState(actor, RunState.streaming);
    await settle();
    actor.send({ type: 'CANCEL', reason: 'user pressed stop' });
    const output = await done;
    late.resolve(answer('too late', [write('w1')]));
    await settle();

    expect(output).toMatchObject({ reason: TurnEndReason.cancelled, steps: 1 });
    expect(output.text).toBeUndefined();
    expect(fakes.calls.stream[0]?.signal.aborted).toBe(true);
    expect(states.at(-1)).toBe(RunState.cancelled);
    expect(fakes.calls.executeTools).toHaveLength(0);
  });

  it('cancelled while a tool batch runs: aborts it and never starts the calls queued behind it', async () => {
    const fakes = createTurnFakes({
      stream: streamOf(answer('', [write('w1'), write('w2'), read('r3')])),
      executeTools: (_input, signal) => untilAborted(signal),
    });
    const { actor, done } = startTurn(fakes);

    await inState(actor, RunState.toolExecution);
    await settle();
    actor.send({ type: 'CANCEL' });
    const output = await done;
    await settle();

    expect(output.reason).toBe(TurnEndReason.cancelled);
    expect(fakes.log.filter((entry) => entry.startsWith('executeTools'))).toEqual(['executeTools:w1']);
    expect(fakes.calls.executeTools[0]?.signal.aborted).toBe(true);
    expect(fakes.calls.stream).toHaveLength(1);
  });

  it('cancelled while awaiting approval: aborts the approval request and runs nothing', async () => {
    const clock = new SimulatedClock();
    const fakes = createTurnFakes({
      stream: streamOf(answer('', [privileged('p1')])),
      requestApproval: (_input, signal) => untilAborted(signal),
    });
    const { actor, done } = startTurn(fakes, {}, { clock });

    await inState(actor, RunState.awaitingApproval);
    await settle();
    actor.send({ type: 'CANCEL' });
    const output = await done;
    clock.increment(60 * 60_000);
    const warn = vi.spyOn(console, 'warn').mockImplementation(() => {});
    actor.send({ type: 'APPROVAL', toolCallId: 'p1', approved: true });
    warn.mockRestore();
    await settle();

    expect(output.reason).toBe(TurnEndReason.cancelled);
    expect(fakes.calls.requestApproval[0]?.signal.aborted).toBe(true);
    expect(fakes.calls.executeTools).toHaveLength(0);
  });

  it('cancelled while compacting: aborts the compaction and never streams', async () => {
    const fakes = createTurnFakes({
      prepare: () => ({ needsCompaction: true, request: { model: 'm', messages: [], tools: [] } }),
      compact: (_input, signal) => untilAborted(signal),
    });
    const { actor, done } = startTurn(fakes);

    await inState(actor, RunState.compacting);
    await settle();
    actor.send({ type: 'CANCEL' });

    expect((await done).reason).toBe(TurnEndReason.cancelled);
    expect(fakes.calls.compact[0]?.signal.aborted).toBe(true);
    expect(fakes.calls.stream).toHaveLength(0);
  });

  it('a CANCEL after the turn ended changes nothing', async () => {
    const fakes = createTurnFakes();
    const { actor, done } = startTurn(fakes);

    const output = await done;
    // XState warns about events sent to a finished actor; that warning is the expected outcome here.
    const warn = vi.spyOn(console, 'warn').mockImplementation(() => {});
    actor.send({ type: 'CANCEL' });
    warn.mockRestore();

    expect(output.reason).toBe(TurnEndReason.yielded);
    expect(actor.getSnapshot().value).toBe(RunState.yielding);
    expect(actor.getSnapshot().output).toEqual(output);
  });
});
