import { ErrorCode, LogEventType, hasInvalidArguments } from '../../../src/protocol/index.ts';
import type { LogEvent } from '../../../src/protocol/index.ts';
import type { ModelEscalation } from '../../../machines/index.ts';

/** Validation failures of the small model after which a turn moves to the large one. */
const DEFAULT_MAX_VALIDATION_FAILURES = 2;

/** Why a step runs on the large model. */
export const EscalationReason = {
  complex: 'complex',
  validationFailures: 'validation_failures',
  contextWindow: 'context_window',
} as const;
export type EscalationReason = (typeof EscalationReason)[keyof typeof EscalationReason];

/** What the choice between the small and the large model looks at. */
export interface EscalationInput extends ModelEscalation {
  /** Tool calls of this turn whose arguments failed validation (see {@link countValidationFailures}). */
  readonly validationFailures: number;
  /**
   * Tokens of the history (system prompt and tools not included): Preparing gives an upper bound that is over
   * `smallContextBudget` exactly when the exact count is (`PreparedContext.historyTokens`), so compare it with that only.
   */
  readonly contextTokens: number;
  /** Tokens of history the small model can take: its window less system prompt, tools, answer and safety reserve. */
  readonly smallContextBudget: number;
  /** Default {@link DEFAULT_MAX_VALIDATION_FAILURES}. */
  readonly maxValidationFailures?: number;
  /** Why an earlier step of this turn escalated: a turn that moved to the large model stays there. */
  readonly escalatedBefore?: EscalationReason;
}

/** The model a step runs on, and why when it is the large one. */
export type EscalationDecision =
  | { readonly model: string; readonly escalated: false }
  | { readonly model: string; readonly escalated: true; readonly reason: EscalationReason };

/**
 * Picks the small or the large model for one step: the large one when the prompt was flagged complex,
 * when the small model's tool arguments failed validation `maxValidationFailures` times in this turn, or
 * when the history no longer fits the small model's budget (rather than cutting it down to fit). Once
 * a turn has escalated it stays on the large model (`escalatedBefore`), even after a compaction.
 *
 * @example
 * decideModel({ smallModel: 'ollama:qwen3', largeModel: 'anthropic:claude-sonnet-5', complex: false,
 *   validationFailures: 2, contextTokens: 900, smallContextBudget: 20_000 });
 * // { model: 'anthropic:claude-sonnet-5', escalated: true, reason: 'validation_failures' }
 */
export function decideModel(input: EscalationInput): EscalationDecision {
  const escalate = (reason: EscalationReason): EscalationDecision => ({ model: input.largeModel, escalated: true, reason });
  if (input.escalatedBefore !== undefined) return escalate(input.escalatedBefore);
  if (input.complex) return escalate(EscalationReason.complex);
  if (input.validationFailures >= (input.maxValidationFailures ?? DEFAULT_MAX_VALIDATION_FAILURES)) {
    return escalate(EscalationReason.validationFailures);
  }
  if (input.contextTokens > input.smallContextBudget) return escalate(EscalationReason.contextWindow);
  return { model: input.smallModel, escalated: false };
}

/**
 * Counts the tool calls of a turn whose arguments failed validation: arguments that were not JSON
 * (`_invalidJson`), or a `tool.result` with error code `invalid_arguments`. A call counts once.
 */
export function countValidationFailures(events: readonly LogEvent[], turnId: string): number {
  const failed = new Set<string>();
  for (const event of events) {
    if (event.turnId !== turnId) continue;
    if (event.type === LogEventType.toolUse && hasInvalidArguments(event.data.args)) failed.add(event.data.toolCallId);
    if (event.type === LogEventType.assistantMessage) {
      for (const call of event.data.toolCalls) if (hasInvalidArguments(call.args)) failed.add(call.id);
    }
    if (event.type === LogEventType.toolResult && event.data.error?.code === ErrorCode.invalidArguments) failed.add(event.data.toolCallId);
  }
  return failed.size;
}
