import { AgentbusError, ErrorCode, toErrorData } from '../../../src/errors.ts';
import type { ErrorData } from '../../../src/errors.ts';
import type { ModelEscalation, ModelRouting } from '../../../machines/index.ts';

/** A turn's models as the session queues it: the primary `model` and what the machine passes through. */
export interface TurnModels extends ModelRouting {
  readonly model: string;
}

/** The model fields of a prompt (and of its `user.message`). */
export interface PromptModels {
  readonly model?: string;
  readonly models?: readonly string[];
  readonly smallModel?: string;
  readonly largeModel?: string;
  readonly complex?: boolean;
}

/** The models in order, each once. */
export function uniqueModels(models: readonly (string | undefined)[]): string[] {
  const seen = new Set<string>();
  const result: string[] = [];
  for (const model of models) {
    if (model === undefined || seen.has(model)) continue;
    seen.add(model);
    result.push(model);
  }
  return result;
}

/**
 * The models of a prompt's turn. The fallback chain is `model` then `models`, or `defaultModel` when the
 * prompt names neither. With `smallModel` + `largeModel` the small one is the primary and the chain
 * (without the default) follows them as fallbacks.
 *
 * @example
 * turnModels({ text, model: 'openai:gpt-5.4-mini', models: ['anthropic:claude-haiku-4-5'] }, 'scripted:default');
 * // { model: 'openai:gpt-5.4-mini', fallbackModels: ['anthropic:claude-haiku-4-5'] }
 */
export function turnModels(prompt: PromptModels, defaultModel: string): TurnModels {
  const chain = uniqueModels([prompt.model, ...(prompt.models ?? [])]);
  if (prompt.smallModel !== undefined && prompt.largeModel !== undefined) {
    const escalation: ModelEscalation = { smallModel: prompt.smallModel, largeModel: prompt.largeModel, complex: prompt.complex === true };
    const fallbackModels = chain.filter((model) => model !== prompt.smallModel && model !== prompt.largeModel);
    return { model: prompt.smallModel, escalation, ...(fallbackModels.length > 0 ? { fallbackModels } : {}) };
  }
  const [model = defaultModel, ...fallbackModels] = chain;
  return fallbackModels.length > 0 ? { model, fallbackModels } : { model };
}

/**
 * The models one step tries, in order: the step's model, then the large model when the step runs on the
 * small one (a small model that fails for good escalates), then the turn's fallbacks.
 */
export function stepChain(stepModel: string, routing: ModelRouting): string[] {
  const large = routing.escalation && stepModel !== routing.escalation.largeModel ? routing.escalation.largeModel : undefined;
  return uniqueModels([stepModel, large, ...(routing.fallbackModels ?? [])]);
}

/**
 * True when a provider failure should move the step to the next model: the provider failed for good
 * (not retryable: `circuit_open`, `unauthorized`, `bad_request`, …; or retryable but already retried by
 * the provider service, as every error that reaches the runtime has been; or `no_responders`: a fallback
 * is tried at once rather than waited for; the step stream waits only when the last model has no responders,
 * then runs the chain again from its first model). A cancel, and input the runtime itself got wrong, would
 * fail on any model the same way.
 */
export function movesToNextModel(error: unknown): boolean {
  const code = error instanceof AgentbusError ? error.code : toErrorData(error).code;
  // A tenant out of spend is out of it on every model.
  return code !== ErrorCode.cancelled && code !== ErrorCode.invalidInput && code !== ErrorCode.budgetExceeded && code !== ErrorCode.spendLimitExceeded;
}

/** Reported before the step moves on to the next model. */
export interface ModelSwitch {
  readonly from: string;
  readonly to: string;
  readonly error: ErrorData;
  /** The place of `to` in the chain, 1-based. */
  readonly attempt: number;
  /** The length of the chain. */
  readonly maxAttempts: number;
}

/** What one attempt is told: call `contentStarted()` once text or a tool call came out. */
export interface ModelAttempt {
  readonly model: string;
  readonly contentStarted: () => void;
}

/**
 * Runs `attempt` on each model of `models` in turn until one succeeds. It moves on only when the
 * attempt failed before producing content, with an error {@link movesToNextModel} accepts, and the
 * signal is not aborted; otherwise the error is thrown. `onSwitch` hears each move before it happens.
 *
 * @example
 * const { value, model } = await runModelChain({
 *   models: ['openai:gpt-5.4-mini', 'anthropic:claude-haiku-4-5'],
 *   signal,
 *   attempt: ({ model, contentStarted }) => streamOnce(model, contentStarted),
 *   onSwitch: (change) => live.publish('retry', scope, { …, model: change.from, nextModel: change.to }),
 * });
 */
export async function runModelChain<T>(options: {
  readonly models: readonly string[];
  readonly signal: AbortSignal;
  readonly attempt: (attempt: ModelAttempt) => Promise<T>;
  readonly onSwitch?: (change: ModelSwitch) => void;
}): Promise<{ value: T; model: string }> {
  const { models, signal } = options;
  if (models.length === 0) throw new AgentbusError(ErrorCode.invalidInput, 'no model to call');
  for (let index = 0; ; index++) {
    const model = models[index]!;
    let started = false;
    try {
      const value = await options.attempt({ model, contentStarted: () => (started = true) });
      return { value, model };
    } catch (error) {
      const next = models[index + 1];
      if (next === undefined || started || signal.aborted || !movesToNextModel(error)) throw error;
      options.onSwitch?.({ from: model, to: next, error: toErrorData(error), attempt: index + 2, maxAttempts: models.length });
    }
  }
}
