import { setTimeout as sleep } from 'node:timers/promises';
import { abortReason } from '../../src/errors.ts';
import { ErrorCode, LiveEventType, SafetyTier } from '../../src/protocol/index.ts';
import type { ToolCallReply, ToolCallRequest } from '../../src/protocol/index.ts';
import type { ToolInfo } from './ports.ts';
import type { SessionServices } from './session-services.ts';

/** Attempts of one call whose workers keep falling silent or unavailable, the first included. */
const MAX_ATTEMPTS = 3;

/** Wait before asking again for a tool that was `unavailable`, times the attempt (an MCP server restarts in 250 ms). */
const UNAVAILABLE_DELAY_MS = 500;

/** Wait before sending again a call a busy worker passed on, times the try. */
const BUSY_DELAY_MS = 200;

/** Codes of replies to calls the worker never started: safe to send again for any tool. */
const NOT_STARTED: ReadonlySet<string> = new Set([ErrorCode.noResponders, ErrorCode.busy]);

/** Sleeps `ms`, or rejects with the signal's reason when it aborts first. */
async function wait(ms: number, signal: AbortSignal): Promise<void> {
  await sleep(ms, undefined, { signal }).catch((error: unknown) => {
    throw signal.aborted ? abortReason(signal) : error;
  });
}

/** What {@link callToolWithRecovery} needs to know of the call besides its request. */
export interface CallScope {
  readonly turnId: string;
  readonly step: number;
  /** The model's id of the call, which `tool.progress` events name. */
  readonly toolCallId: string;
  /** 2 when the call may have run before (a resumed turn); default 1. */
  readonly firstAttempt?: number;
}

/**
 * Calls a tool and recovers from a worker that fell silent (`worker_lost`): the call is made again, as a repeat
 * of the same `effectId`, when that cannot make a side effect twice: the tool is read-only or idempotent, or its
 * workers keep a result ledger (a repeat then gets the recorded outcome, or `interrupted` when the lost worker
 * recorded none). Otherwise the call ends `interrupted`. A read-only or idempotent call answered `unavailable`
 * (what the worker fronts is restarting) is made again after a short wait. At most 3 attempts in all. The
 * worker's progress reports become `tool.progress`.
 */
export async function callToolWithRecovery(
  services: SessionServices,
  request: ToolCallRequest,
  info: ToolInfo,
  scope: CallScope,
  options: { signal: AbortSignal; timeoutMs: number },
): Promise<ToolCallReply> {
  const { tenant, sessionId } = services;
  const onProgress = (event: { message?: string; progress?: number; total?: number }) =>
    services.live.publish(LiveEventType.toolProgress, { tenant, sessionId, turnId: scope.turnId, step: scope.step }, {
      toolCallId: scope.toolCallId,
      name: request.name,
      message: services.scrubber.scrubSync(event.message ?? ''),
      ...(event.progress === undefined ? {} : { progress: event.progress }),
      ...(event.total === undefined ? {} : { total: event.total }),
    });
  // Running it twice has the effect of once; with a ledger, a repeat is answered from the record instead.
  const safeTwice = info.tier === SafetyTier.readOnly || info.idempotent;
  const repeatable = safeTwice || info.ledger === true;
  const first = scope.firstAttempt ?? 1;
  let attempt = first;
  let tries = 0;
  for (;;) {
    tries += 1;
    // A repeat has a call id of its own, unique to this attempt: the workers remember a lost attempt's id as
    // cancelled, and an earlier node's attempt of a resumed call may still run under its own.
    const callId = tries === 1 && attempt === 1 ? request.callId : `${request.callId}~${attempt}.${services.newId()}`;
    // Each try has the whole timeout, the worker's deadline with it: a retry after a late loss is not cut short.
    const deadline = tries === 1 ? request.deadline : services.now() + options.timeoutMs;
    const reply = await services.tools.call({ ...request, callId, deadline }, { ...options, attempt, onProgress });
    if (!reply.ok && NOT_STARTED.has(reply.error.code) && tries < MAX_ATTEMPTS) {
      // A worker that was stopping, or had too many calls waiting, answered before it ran the call: it never
      // started, so it goes out again, whatever its tier, and as the same attempt (not a repeat: nothing ran that
      // a ledger could record). A busy worker pool is given a moment first.
      services.logger.debug({ tool: request.name, attempt, error: reply.error }, 'a tool worker passed a call on; calling again');
      if (reply.error.code === ErrorCode.busy) await wait(BUSY_DELAY_MS * tries, options.signal);
      continue;
    }
    if (!reply.ok && reply.error.code === ErrorCode.unavailable && safeTwice && attempt - first + 1 < MAX_ATTEMPTS) {
      // The worker is alive but what it fronts is not (an MCP server it is restarting): wait a little, ask again.
      services.logger.debug({ tool: request.name, attempt, error: reply.error }, 'a tool was unavailable; calling again');
      await wait(UNAVAILABLE_DELAY_MS * attempt, options.signal);
      attempt += 1;
      continue;
    }
    if (reply.ok || reply.error.code !== ErrorCode.workerLost) return { ...reply, callId: request.callId };
    services.logger.warn({ tool: request.name, effectId: request.effectId, attempt, error: reply.error }, 'a tool worker fell silent during a call');
    if (!repeatable) {
      const message = `the worker running ${request.name} stopped answering mid-call (${reply.error.message}); it may or may not have taken effect, and the call is not made again because ${request.name} is not idempotent`;
      return { v: 1, callId: request.callId, ok: false, error: { code: ErrorCode.interrupted, message, retryable: false } };
    }
    if (attempt - first + 1 >= MAX_ATTEMPTS) return { ...reply, callId: request.callId };
    options.signal.throwIfAborted();
    attempt += 1;
  }
}
