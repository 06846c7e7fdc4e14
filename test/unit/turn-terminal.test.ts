import { describe, expect, it } from 'vitest';
import { transition } from 'xstate';
import { turnMachine } from '../../machines/index.ts';
import { ZERO_USAGE } from '../../src/protocol/index.ts';

describe('a finished turn', () => {
  it('stays in its terminal state when a pure transition() replays a late CANCEL', () => {
    for (const [value, outcome] of [
      ['Yielding', 'yielded'],
      ['BudgetExceeded', 'budget_exceeded'],
      ['Failed', 'failed'],
    ] as const) {
      const snapshot = turnMachine.resolveState({
        value,
        context: {
          turn: {
            turnId: 't',
            model: 'scripted:default',
            routing: {},
            maxSteps: 8,
            maxCost: undefined,
            deadline: undefined,
            timeLeftMs: undefined,
            finalAnswer: true,
          },
          final: false,
          step: 1,
          compacted: false,
          request: undefined,
          pending: [],
          decisions: {},
          usage: ZERO_USAGE,
          cost: 0,
          text: 'done',
          outcome,
          error: undefined,
        },
      });
      const [next] = transition(turnMachine, snapshot, { type: 'CANCEL' });
      expect(next.value).toBe(value);
    }
  });
});
