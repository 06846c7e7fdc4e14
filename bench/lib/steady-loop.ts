import { now, summarize } from './stats.ts';
import type { LoadResult } from './load.ts';
import type { Summary } from './stats.ts';

/** One session of a {@link steadyLoop}: its worker, when it began and ended, and whether it succeeded. */
export interface SessionSpan {
  readonly worker: number;
  readonly start: number;
  readonly end: number;
  readonly ok: boolean;
}

/** A closed loop's rate in its steady state, and what its ramp looked like. */
export interface SteadyLoadResult extends LoadResult {
  /** From the loop's start to the window's: every worker's first session, and at least `minRampMs`. */
  readonly rampMs: number;
  /** Latency of each worker's first session: all `concurrency` of them start in the same millisecond. */
  readonly firstRoundMs: Summary;
  /** Every session's span, the ramp's included (for breakdowns). */
  readonly spans: readonly SessionSpan[];
}

/**
 * The sessions per second of a closed loop whose `spans` ran, over `[from, to]`: each session counts for the part
 * of it inside the window (a session half inside counts half), so the figure does not depend on where the window
 * cuts a loop whose sessions end in bursts. With `n` workers always busy and every session taking `L`, it is
 * exactly `n / L`; time a worker spends between sessions, and failed sessions, count for nothing.
 */
export function windowRate(spans: readonly SessionSpan[], from: number, to: number): number {
  let done = 0;
  for (const span of spans) {
    if (!span.ok || span.end <= from || span.start >= to || span.end <= span.start) continue;
    done += (Math.min(span.end, to) - Math.max(span.start, from)) / (span.end - span.start);
  }
  return done / ((to - from) / 1000);
}

/**
 * Runs `session(i)` from `concurrency` workers, each starting a new session as soon as its last one ends, and
 * measures the steady state: the window of `windowMs` opens once every worker has ended its first session (the
 * ramp: `concurrency` sessions arriving at once, on a node that may be cold) and `minRampMs` has passed. No
 * session starts after the window closes; those in flight finish and count for their part inside it (see
 * {@link windowRate}). `failures` counts every failed session, the ramp's included; `latencyMs` summarizes the
 * successful sessions that overlap the window.
 */
export async function steadyLoop(
  session: (index: number) => Promise<void>,
  options: { concurrency: number; windowMs: number; minRampMs?: number },
): Promise<SteadyLoadResult> {
  const spans: SessionSpan[] = [];
  const begin = now();
  let started = 0;
  let failures = 0;
  let firstError: unknown;
  let firstsDone = 0;
  let windowStart = Number.POSITIVE_INFINITY;
  let windowEnd = Number.POSITIVE_INFINITY;
  const worker = async (id: number) => {
    let first = true;
    while (now() < windowEnd) {
      const index = started++;
      const start = now();
      let ok = true;
      try {
        await session(index);
      } catch (error) {
        ok = false;
        failures += 1;
        firstError ??= error;
      }
      const end = now();
      spans.push({ worker: id, start, end, ok });
      if (first) {
        first = false;
        firstsDone += 1;
        if (firstsDone === options.concurrency) {
          windowStart = Math.max(end, begin + (options.minRampMs ?? 0));
          windowEnd = windowStart + options.windowMs;
        }
      }
    }
  };
  await Promise.all(Array.from({ length: options.concurrency }, (_, id) => worker(id)));
  if (failures > 0 && spans.every((span) => !span.ok)) throw firstError;
  if (firstError) process.stderr.write(`  ${failures} session(s) failed; first: ${String(firstError)}\n`);
  const inWindow = spans.filter((span) => span.ok && span.end > windowStart && span.start < windowEnd);
  const firsts = new Map<number, SessionSpan>();
  for (const span of spans) if (!firsts.has(span.worker)) firsts.set(span.worker, span);
  return {
    concurrency: options.concurrency,
    sessions: inWindow.length,
    seconds: options.windowMs / 1000,
    sessionsPerSecond: windowRate(spans, windowStart, windowEnd),
    latencyMs: summarize(inWindow.map((span) => span.end - span.start)),
    failures,
    rampMs: windowStart - begin,
    firstRoundMs: summarize([...firsts.values()].map((span) => span.end - span.start)),
    spans,
  };
}
