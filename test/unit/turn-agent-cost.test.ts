import { describe, expect, it } from 'vitest';
import { createActor, toPromise } from 'xstate';
import { turnMachine } from '../../machines/turn.ts';
import type { TurnInput } from '../../machines/turn.ts';
import { TurnEndReason } from '../../src/protocol/index.ts';
import { answer, createTurnFakes, streamOf, write } from '../helpers/turn-fakes.ts';
import type { TurnFakes } from '../helpers/turn-fakes.ts';

// A batch of tool calls may cost something of its own (an agent call's child turn): the turn machine counts it in
// the turn's usage and cost, and a turn it takes over maxCost ends BudgetExceeded before another step.

function run(fakes: TurnFakes, input: Partial<TurnInput> = {}) {
  const actor = createActor(turnMachine.provide({ actors: fakes.actors }), { input: { turnId: 'turn-1', model: 'scripted:default', maxSteps: 8, ...input } });
  const done = toPromise(actor);
  actor.start();
  return done;
}

const childUsage = { inputTokens: 30, outputTokens: 7 };

describe('turn machine: what tool batches cost', () => {
  it("adds a batch's reported usage and cost (an agent call's child turn) to the turn's", async () => {
    const fakes = createTurnFakes({
      stream: streamOf(answer('', [write('agent')], 0.01), answer('done', [], 0.01)),
      executeTools: () => ({ usage: childUsage, cost: 0.05 }),
    });
    const output = await run(fakes);
    expect(output.reason).toBe(TurnEndReason.yielded);
    expect(output.cost).toBeCloseTo(0.07, 10);
    expect(output.usage.inputTokens).toBeGreaterThanOrEqual(30);
  });

  it('ends BudgetExceeded after the batch, without another step, when that cost passes maxCost', async () => {
    const fakes = createTurnFakes({
      stream: streamOf(answer('', [write('agent')], 0.01), answer('never', [], 0.01)),
      executeTools: () => ({ usage: childUsage, cost: 0.5 }),
    });
    const output = await run(fakes, { maxCost: 0.1 });
    expect(output.reason).toBe(TurnEndReason.budgetExceeded);
    expect(output.cost).toBeCloseTo(0.51, 10);
    expect(fakes.calls.stream).toHaveLength(1);
  });

  it('counts nothing for a batch that reports nothing (a plain worker tool)', async () => {
    const fakes = createTurnFakes({ stream: streamOf(answer('', [write('w')], 0.01), answer('done', [], 0.01)) });
    const output = await run(fakes, { maxCost: 0.1 });
    expect(output).toMatchObject({ reason: TurnEndReason.yielded });
    expect(output.cost).toBeCloseTo(0.02, 10);
  });
});
