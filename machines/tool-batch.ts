import { SafetyTier } from '../src/protocol/index.ts';
import type { ToolCall } from '../src/protocol/index.ts';

/** A tool call as the turn plans it: the model's call plus the tier of the tool (`unknown` when no worker serves it). */
export interface PlannedCall extends ToolCall {
  readonly tier: SafetyTier | 'unknown';
  /** The call may have run before (its turn is resumed after its node died): it is sent as a repeat. */
  readonly resumed?: boolean;
  /**
   * A resumed call whose `tool.use` was logged: the effectId it went out under. A repeat goes out under the same one
   * (a log written by an older runtime holds another format), so a worker's ledger and an idempotent tool know it.
   */
  readonly effectId?: string;
  /**
   * A resumed call whose `tool.use` was logged before its node died, no hook blocking it: the arguments it went
   * out with (the model's, or as the before-hooks rewrote them). It goes out with these again, and the
   * before-hooks are not asked again: their decision is in the log, and a repeat must be the same call.
   */
  readonly sent?: { readonly args: unknown; readonly argsRewrittenBy?: readonly string[] };
}

/** A decision on a privileged call. */
export interface ApprovalDecision {
  readonly approved: boolean;
  readonly reason?: string;
}

function runsInParallel(call: PlannedCall): boolean {
  // An unknown tool fails at once without side effects, so it may join a read-only batch.
  return call.tier === SafetyTier.readOnly || call.tier === 'unknown';
}

/**
 * The next calls to run together: the leading run of read-only calls, or a single side-effecting or
 * privileged call. Order is kept, so a side-effecting call flushes the batch before it.
 *
 * @example
 * nextBatch([read('a'), read('b'), write('c'), read('d')]) // → [read('a'), read('b')]
 */
export function nextBatch(pending: readonly PlannedCall[]): PlannedCall[] {
  const first = pending[0];
  if (!first) return [];
  if (!runsInParallel(first)) return [first];
  const batch: PlannedCall[] = [];
  for (const call of pending) {
    if (!runsInParallel(call)) break;
    batch.push(call);
  }
  return batch;
}

/** True when the next call is privileged and nobody has decided on it yet. */
export function needsApproval(pending: readonly PlannedCall[], decisions: Readonly<Record<string, ApprovalDecision>>): boolean {
  const first = pending[0];
  return first !== undefined && first.tier === SafetyTier.privileged && decisions[first.id] === undefined;
}
