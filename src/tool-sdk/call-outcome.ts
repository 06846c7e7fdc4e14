import { ErrorCode } from '../errors.ts';
import type { Logger } from '../logging.ts';
import { SafetyTier } from '../protocol/index.ts';
import type { ToolCallReply, ToolCallRequest } from '../protocol/index.ts';
import type { Scrubber } from '../scrub/index.ts';
import type { AnyToolDefinition } from './define-tool.ts';
import { errorReply, executeToolCall } from './execute-tool-call.ts';
import type { ExecuteToolCallOptions } from './execute-tool-call.ts';
import { answerRepeat, isSettled, recordOutcome, scrubbedForLedger } from './recorded-call.ts';
import type { ResultLedger } from './result-ledger.ts';

/** A call a worker accepted and has a slot for. */
export interface CallToSettle {
  readonly tool: AnyToolDefinition;
  readonly request: ToolCallRequest;
  /** Aborts on the caller's cancel or the worker stopping. */
  readonly signal: AbortSignal;
  /** 1 for a first attempt; more for a repeat of the same `effectId` (`Agentbus-Attempt`). */
  readonly attempt: number;
  /** The caller asked for the output as scrubbed text (`Agentbus-Scrub-Output`). */
  readonly scrubOutput?: boolean;
}

/** What settling a call needs of its worker. */
export interface CallOutcomeDeps extends Pick<ExecuteToolCallOptions, 'now' | 'stateFor' | 'onProgress'> {
  /** The ledger, when this tool's outcomes are recorded (a side-effecting or privileged tool of a worker keeping one). */
  readonly ledger: ResultLedger | undefined;
  readonly scrubber: Pick<Scrubber, 'scrub'>;
  readonly logger: Logger;
  /** The worker's `$SRV` id, kept with each record. */
  readonly workerId: () => string | undefined;
}

/** A call's reply, and the ledger write sent before it (its acknowledgement awaited after the reply). */
export interface CallOutcome {
  readonly body: ToolCallReply;
  readonly recording?: Promise<void>;
  /** True when `body` is a successful reply whose output is text scrubbed with the full pass, as the caller asked. */
  readonly scrubbed?: true;
}

/**
 * The outcome of a call: a repeat of a recorded tool's call may be answered from the ledger without running (and a
 * repeat of a non-idempotent side effect on a worker keeping no ledger is not run at all: at most once); otherwise
 * the tool runs, and a recorded tool's settled outcome is scrubbed and sent to the ledger before the reply goes out. A
 * successful output the caller asked for scrubbed (`scrubOutput`) is sent as that scrubbed text, `scrubbed` then set.
 * The reply wins over the record: a record that cannot be made is logged, and the reply goes out all the same.
 */
export async function settleCall(call: CallToSettle, deps: CallOutcomeDeps): Promise<CallOutcome> {
  const { tool, request, signal } = call;
  const { ledger, logger } = deps;
  if (ledger && call.attempt > 1) {
    const answered = await answerRepeat(ledger, tool, request, { signal, logger });
    if (answered) return { body: answered };
  } else if (call.attempt > 1 && tool.tier !== SafetyTier.readOnly && !tool.idempotent) {
    // No ledger to tell whether the earlier attempt ran: at most once, as the repeat's caller asked.
    const message = `an earlier attempt of this call to ${tool.name} may have run, and this worker keeps no record of outcomes; it is not run again because ${tool.name} is not idempotent`;
    return { body: errorReply(request.callId, { code: ErrorCode.interrupted, message, retryable: false }) };
  }
  let ran = false;
  const body = await executeToolCall({
    tool,
    request,
    logger: () => logger.child({ tool: tool.name, callId: request.callId }),
    signal,
    now: deps.now,
    ...(deps.stateFor ? { stateFor: deps.stateFor } : {}),
    ...(deps.onProgress ? { onProgress: deps.onProgress } : {}),
    onStarted: () => {
      ran = true;
    },
  });
  const recorded = ledger !== undefined && ran && isSettled(body);
  // A successful output scrubbed for a caller that asked is what the ledger keeps too: one scrub serves both.
  const scrubbing = call.scrubOutput === true && body.ok;
  if (!recorded && !scrubbing) return { body };
  let kept: ToolCallReply;
  try {
    kept = await scrubbedForLedger(body, deps.scrubber);
  } catch (err) {
    // The tool ran: its caller gets its reply whatever becomes of the record (a repeat then ends interrupted), as
    // it is, not marked scrubbed (the caller scrubs it then).
    const what = recorded ? 'could not prepare a call outcome for the result ledger: a repeat of it will end interrupted' : 'could not scrub a tool output; it is sent as it is';
    logger.warn({ err, tool: tool.name, effectId: request.effectId }, what);
    return { body };
  }
  const sent: CallOutcome = scrubbing ? { body: kept, scrubbed: true } : { body };
  if (!recorded) return sent;
  return { ...sent, recording: recordOutcome(ledger, tool, request, kept, { now: deps.now, workerId: deps.workerId(), logger }) };
}
