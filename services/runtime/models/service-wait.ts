import { setTimeout as delay } from 'node:timers/promises';
import { AgentbusError, ErrorCode, ProviderError, abortReason, toErrorData } from '../../../src/errors.ts';
import type { ErrorData } from '../../../src/errors.ts';

/** The waits between attempts, in order; the last one repeats until the wait's time is up. */
export const SERVICE_WAIT_DELAYS_MS = [250, 500, 1000, 2000] as const;

/**
 * The waits of a tool call nobody took: shorter at first than a provider's, since a worker that is one of several
 * restarting (a rolling restart) is usually back, or another one free, within a tenth of a second.
 */
export const TOOL_WAIT_DELAYS_MS = [100, 200, 400, 800, 1600, 2000] as const;

/** One wait for a service that is not there (yet): published as a live `retry` event. */
export interface ServiceWaitReport {
  /** The attempt that comes after this wait, 2 and up. */
  readonly attempt: number;
  /** The most attempts the wait allows (the first one included), from its schedule. */
  readonly maxAttempts: number;
  readonly delayMs: number;
  /** The `no_responders` error that started this wait. */
  readonly error: ErrorData;
}

/** Options of {@link waitForService}. */
export interface ServiceWaitOptions<T> {
  /** The call to make, and to make again after each wait. */
  readonly call: () => Promise<T>;
  /** The longest time spent waiting, summed over the waits (`AGENTBUS_WAIT_FOR_SERVICE_MS`); 0 never waits. */
  readonly waitMs: number;
  /** Aborts the wait at once, with the signal's own reason. */
  readonly signal: AbortSignal;
  /** Hears each wait before it starts. */
  readonly onWait?: (report: ServiceWaitReport) => void;
  /** Waits between attempts; default {@link SERVICE_WAIT_DELAYS_MS}. */
  readonly delaysMs?: readonly number[];
}

/**
 * The delays a wait of `waitMs` takes, in order: the schedule's, the last one repeated, as long as their sum
 * stays within `waitMs` (the last delay shortened to meet it exactly).
 *
 * @example
 * serviceWaitSchedule(2000); // [250, 500, 1000, 250]
 */
export function serviceWaitSchedule(waitMs: number, delaysMs: readonly number[] = SERVICE_WAIT_DELAYS_MS): number[] {
  const schedule: number[] = [];
  let total = 0;
  for (let index = 0; total < waitMs; index++) {
    const next = Math.min(delaysMs[Math.min(index, delaysMs.length - 1)]!, waitMs - total);
    if (next <= 0) break;
    schedule.push(next);
    total += next;
  }
  return schedule;
}

/** True for an error that says nobody serves the subject now (and was not already waited for). */
export function isServiceAbsent(error: unknown): boolean {
  const data = error instanceof AgentbusError ? error : toErrorData(error);
  return data.code === ErrorCode.noResponders && data.retryable;
}

/**
 * Makes `call`, and while it fails with a retryable `no_responders` (no service listens: it has not started
 * yet, or it is restarting) makes it again after a wait, with backoff, until the summed waits reach `waitMs`.
 * Each wait is reported to `onWait` first. When the time is up the last error is thrown again, made
 * non-retryable and its message saying how long was waited, so that an outer wait does not wait again.
 * Any other error is thrown at once; an abort rejects with the signal's reason at once, mid-wait too.
 *
 * @example
 * const value = await waitForService({
 *   call: () => streamOnce(model),
 *   waitMs: config.waitForServiceMs,
 *   signal,
 *   onWait: (wait) => live.publish('retry', scope, { ...wait, model }),
 * });
 */
export async function waitForService<T>(options: ServiceWaitOptions<T>): Promise<T> {
  const { signal } = options;
  // Made at the first wait: almost every call is answered at once.
  let schedule: number[] | undefined;
  for (let attempt = 1; ; attempt++) {
    signal.throwIfAborted();
    try {
      return await options.call();
    } catch (error) {
      if (signal.aborted || !isServiceAbsent(error)) throw error;
      schedule ??= serviceWaitSchedule(options.waitMs, options.delaysMs);
      const delayMs = schedule[attempt - 1];
      if (delayMs === undefined) throw gaveUp(error, options.waitMs);
      options.onWait?.({ attempt: attempt + 1, maxAttempts: schedule.length + 1, delayMs, error: toErrorData(error) });
      // Node rejects an aborted delay with a plain AbortError; the caller needs the signal's own reason (a timeout stays a timeout).
      await delay(delayMs, undefined, { signal }).catch(() => {
        throw abortReason(signal);
      });
    }
  }
}

/** The error a wait ends in: the absent service's, not retryable any more, saying how long was waited. */
function gaveUp(error: unknown, waitMs: number): AgentbusError {
  const data = toErrorData(error);
  const message = waitMs > 0 ? `${data.message}; waited ${waitMs} ms for one to start (AGENTBUS_WAIT_FOR_SERVICE_MS)` : data.message;
  // A provider's error stays a ProviderError naming its provider.
  if (error instanceof ProviderError) return new ProviderError(data.code, message, { retryable: false, provider: error.provider, cause: error });
  return new AgentbusError(data.code, message, { retryable: false, cause: error });
}
