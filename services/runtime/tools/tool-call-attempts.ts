import { setTimeout as sleep } from 'node:timers/promises';
import { abortReason } from '../../../src/errors.ts';
import { ErrorCode, LiveEventType, SafetyTier } from '../../../src/protocol/index.ts';
import type { ToolCallRequest } from '../../../src/protocol/index.ts';
import type { ToolClientReply } from '../../../src/bus/tool-client.ts';
import type { ToolInfo } from '../ports.ts';
import type { SessionServices } from '../turn/session-services.ts';
import { TOOL_WAIT_DELAYS_MS, serviceWaitSchedule } from '../models/service-wait.ts';

/** Attempts of one call whose workers keep falling silent or unavailable, the first included. */
const MAX_ATTEMPTS = 3;

/** Wait before asking again for a tool that was `unavailable`, times the attempt (an MCP server restarts in 250 ms). */
const UNAVAILABLE_DELAY_MS = 500;

/** Wait before sending again a call a busy worker passed on, times the try. */
const BUSY_DELAY_MS = 200;

/** Sleeps `ms`, or rejects with the signal's reason when it aborts first. */
async function wait(ms: number, signal: AbortSignal): Promise<void> {
  await sleep(ms, undefined, { signal }).catch((error: unknown) => {
    throw signal.aborted ? abortReason(signal) : error;
  });
}

/** A call as the turn plans it: the request but for its `callId`, which each attempt is given anew. */
export type PlannedToolRequest = Omit<ToolCallRequest, 'callId' | 'toolCallId'>;

/** What {@link callToolWithRecovery} needs to know of the call besides its request. */
export interface CallScope {
  readonly turnId: string;
  readonly step: number;
  /** The model's id of the call: `tool.progress` and `retry` events name it, and the worker is told it. */
  readonly toolCallId: string;
  /** 2 when the call may have run before (a resumed turn); default 1. */
  readonly firstAttempt?: number;
}

/**
 * A call's timeout cut to end by `deadline` (epoch ms, the turn's) when there is one; never below 0.
 *
 * @example
 * withinDeadline(120_000, now + 5_000, now); // 5000
 */
export function withinDeadline(timeoutMs: number, deadline: number | undefined, now: number): number {
  return deadline === undefined ? timeoutMs : Math.max(0, Math.min(timeoutMs, deadline - now));
}

/**
 * Calls a tool and recovers from what keeps it from answering. Every send has a `callId` of its own, minted here
 * (fleet-unique, so that a cancel names one attempt of one session and nothing else; the model's id travels as
 * `toolCallId`), while `effectId` stays the call's.
 *
 * - No worker listening (`no_responders`: a rolling restart, a worker started later) or a worker passing the call on
 *   (`busy`): the call never started, so it goes out again whatever its tier, as the same attempt. `no_responders`
 *   is waited out with backoff for up to `config.waitForServiceMs`, each wait published as a live `retry`.
 * - A worker that fell silent (`worker_lost`): made again, as a repeat of the same `effectId`, when that cannot make
 *   a side effect twice (the tool is read-only or idempotent, or its workers keep a result ledger, which answers the
 *   repeat from the record or `interrupted`). Otherwise the call ends `interrupted`.
 * - `unavailable` (what the worker fronts is restarting): a read-only or idempotent call is asked again after a
 *   short wait.
 *
 * At most 3 attempts for the last two. The worker's progress reports become `tool.progress`. Returns the reply of
 * the last send (its `callId` that send's).
 */
export async function callToolWithRecovery(
  services: SessionServices,
  request: PlannedToolRequest,
  info: ToolInfo,
  scope: CallScope,
  options: { signal: AbortSignal; timeoutMs: number; /** The turn's deadline (epoch ms): no send runs past it. */ notAfter?: number },
): Promise<ToolClientReply> {
  const { tenant, sessionId } = services;
  const where = { tenant, sessionId, turnId: scope.turnId, step: scope.step };
  const onProgress = (event: { message?: string; progress?: number; total?: number }) =>
    services.live.publish(LiveEventType.toolProgress, where, {
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
  // Made at the first wait for a worker: almost every call is taken at once.
  let waits: readonly number[] | undefined;
  let attempt = first;
  let busyTries = 0;
  let waited = 0;
  for (let sends = 0; ; sends += 1) {
    // Each send is its own attempt id: a lost attempt's id may be remembered as cancelled by the workers, and an
    // earlier node's attempt of a resumed call may still run under its own.
    const callId = services.newId();
    // Each send has the whole timeout, the worker's deadline with it: a retry after a late loss is not cut short,
    // but none runs past the turn's deadline.
    const { notAfter, ...callOptions } = options;
    const timeoutMs = sends === 0 ? options.timeoutMs : withinDeadline(options.timeoutMs, notAfter, services.now());
    const deadline = sends === 0 ? request.deadline : services.now() + timeoutMs;
    const reply = await services.tools.call({ ...request, callId, toolCallId: scope.toolCallId, deadline }, { ...callOptions, timeoutMs, attempt, onProgress, scrubOutput: true });
    const noWorker = !reply.ok && reply.error.code === ErrorCode.noResponders;
    if (noWorker) waits ??= serviceWaitSchedule(services.config.waitForServiceMs, TOOL_WAIT_DELAYS_MS);
    const delayMs = noWorker ? waits?.[waited] : undefined;
    if (!reply.ok && delayMs !== undefined) {
      // No worker took it (none listening, or one stopping passed it on): it never started, so it goes out again
      // whatever its tier, and as the same attempt (not a repeat: nothing ran that a ledger could record).
      waited += 1;
      services.logger.debug({ tool: request.name, attempt, delayMs, error: reply.error }, 'no tool worker took a call; waiting for one');
      services.live.publish(LiveEventType.retry, where, {
        attempt: waited + 1,
        maxAttempts: (waits?.length ?? 0) + 1,
        delayMs,
        error: reply.error,
        tool: request.name,
        toolCallId: scope.toolCallId,
      });
      await wait(delayMs, options.signal);
      continue;
    }
    if (!reply.ok && reply.error.code === ErrorCode.busy && busyTries + 1 < MAX_ATTEMPTS) {
      // A worker had too many calls waiting and passed this one on before running it: give the pool a moment.
      busyTries += 1;
      services.logger.debug({ tool: request.name, attempt, error: reply.error }, 'a tool worker passed a call on; calling again');
      await wait(BUSY_DELAY_MS * busyTries, options.signal);
      continue;
    }
    if (!reply.ok && reply.error.code === ErrorCode.unavailable && safeTwice && attempt - first + 1 < MAX_ATTEMPTS) {
      // The worker is alive but what it fronts is not (an MCP server it is restarting): wait a little, ask again.
      services.logger.debug({ tool: request.name, attempt, error: reply.error }, 'a tool was unavailable; calling again');
      await wait(UNAVAILABLE_DELAY_MS * attempt, options.signal);
      attempt += 1;
      continue;
    }
    if (!reply.ok && reply.error.code === ErrorCode.noResponders && waited > 0) {
      // The wait is over, as the provider's ends (service-wait.ts): retrying now would only wait again.
      const message = `${reply.error.message}; waited ${services.config.waitForServiceMs} ms for one to start (AGENTBUS_WAIT_FOR_SERVICE_MS)`;
      return { ...reply, error: { ...reply.error, message, retryable: false } };
    }
    if (reply.ok || reply.error.code !== ErrorCode.workerLost) return reply;
    services.logger.warn({ tool: request.name, effectId: request.effectId, attempt, error: reply.error }, 'a tool worker fell silent during a call');
    if (!repeatable) {
      const message = `the worker running ${request.name} stopped answering mid-call (${reply.error.message}); it may or may not have taken effect, and the call is not made again because ${request.name} is not idempotent`;
      return { v: 1, callId, ok: false, error: { code: ErrorCode.interrupted, message, retryable: false } };
    }
    if (attempt - first + 1 >= MAX_ATTEMPTS) return reply;
    options.signal.throwIfAborted();
    attempt += 1;
  }
}
