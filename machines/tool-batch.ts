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
  /** The call is suspended on a question to the user (`tool.input_requested`): it waits in AwaitingApproval. */
  readonly asking?: InputRequest;
  /** The answers the call was given so far, oldest first: it is made again with them (same `effectId`). */
  readonly inputs?: readonly GivenInput[];
  /** Nobody answered `asking` before its deadline: the call ends with an error result instead of running again. */
  readonly inputTimedOut?: InputRequest;
}

/** A question a suspended call asks the user. */
export interface InputRequest {
  /** `<toolCallId>:<n>`, n counting the call's questions from 1. */
  readonly requestId: string;
  readonly question: string;
  /** JSON Schema the answer must match, when the tool gave one. */
  readonly schema?: Readonly<Record<string, unknown>>;
}

/** An answer given to a call's question. */
export interface GivenInput {
  readonly requestId: string;
  readonly question: string;
  readonly answer: unknown;
}

/**
 * A decision on a privileged call: approve or deny; approve with edited `args` (the call goes out with those); or
 * `respond`, a text that is the call's result in the tool's place (the tool does not run; `approved` is false).
 */
export interface ApprovalDecision {
  readonly approved: boolean;
  readonly reason?: string;
  readonly args?: unknown;
  readonly respond?: string;
  /** Nobody decided before the request's deadline: this is its default decision. */
  readonly timedOut?: boolean;
}

/** What the suspended calls of a batch asked (`ExecuteToolsOutput.suspended`): each stays pending, asking. */
export interface SuspendedCall {
  readonly id: string;
  readonly asking: InputRequest;
  /** The effectId it went out under, and the arguments: it is made again with these, its `tool.use` not logged again. */
  readonly effectId: string;
  readonly sent: { readonly args: unknown; readonly argsRewrittenBy?: readonly string[] };
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

/** The pending call suspended on a question to the user, if any (suspended calls stay at the front of `pending`). */
export function askingCall(pending: readonly PlannedCall[]): PlannedCall | undefined {
  return pending.find((call) => call.asking !== undefined);
}

/**
 * `pending` after its next batch ran: the batch's calls are done but those that `suspended` names, which stay at the
 * front, asking their question.
 */
export function afterBatch(pending: readonly PlannedCall[], suspended: readonly SuspendedCall[] = []): PlannedCall[] {
  const batch = nextBatch(pending);
  const rest = pending.slice(batch.length);
  if (suspended.length === 0) return rest;
  const kept: PlannedCall[] = [];
  for (const call of batch) {
    const asked = suspended.find((candidate) => candidate.id === call.id);
    if (!asked) continue;
    // A re-call after an answer is a first attempt of the call with its answers, not a repeat of one that may have run.
    const { inputTimedOut: _timedOut, resumed: _resumed, ...plain } = call;
    kept.push({ ...plain, asking: asked.asking, effectId: asked.effectId, sent: asked.sent });
  }
  return [...kept, ...rest];
}
