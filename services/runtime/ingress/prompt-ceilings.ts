import { InvalidInputError } from '../../../src/errors.ts';
import type { Prompt } from '../../../src/protocol/index.ts';
import type { PromptCeilings } from '../config.ts';

/**
 * The prompt as it may run under the operator's ceilings: refused (an `invalid_input` error naming the ceiling and
 * its variable) when it asks for more steps or a higher cost than allowed; given the cost ceiling as its `maxCost`
 * when it names none and the operator set one. A prompt is refused rather than quietly clamped: a client that asked
 * for 100 steps and got 32 would learn of it only when its turn ended `budget_exceeded` half-way.
 *
 * @example
 * withinCeilings({ text: 'hi', maxSteps: 100 }, { maxSteps: 32 }); // throws: maxSteps 100 is above … 32
 * withinCeilings({ text: 'hi' }, { maxSteps: 32, maxCost: 0.5 }); // { text: 'hi', maxCost: 0.5 }
 */
export function withinCeilings(prompt: Prompt, ceilings: PromptCeilings): Prompt {
  if (prompt.maxSteps !== undefined && prompt.maxSteps > ceilings.maxSteps) {
    throw new InvalidInputError(`maxSteps ${prompt.maxSteps} is above this deployment's ceiling of ${ceilings.maxSteps} steps (AGENTBUS_MAX_STEPS_CEILING); ask for at most ${ceilings.maxSteps}`);
  }
  if (ceilings.maxCost === undefined) return prompt;
  if (prompt.maxCost === undefined) return { ...prompt, maxCost: ceilings.maxCost };
  if (prompt.maxCost > ceilings.maxCost) {
    throw new InvalidInputError(`maxCost ${prompt.maxCost} is above this deployment's cost ceiling of ${ceilings.maxCost} USD (AGENTBUS_MAX_COST_CEILING); ask for at most ${ceilings.maxCost}`);
  }
  return prompt;
}
