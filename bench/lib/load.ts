import { now, summarize } from './stats.ts';
import type { Summary } from './stats.ts';

/** One run of a closed-loop load: `concurrency` workers each start a new session as soon as theirs ends. */
export interface LoadResult {
  readonly concurrency: number;
  readonly sessions: number;
  readonly seconds: number;
  readonly sessionsPerSecond: number;
  readonly latencyMs: Summary;
  readonly failures: number;
}

/**
 * Runs `session(i)` from `concurrency` workers until `durationMs` has passed (no new session starts after
 * it; those in flight finish and count), and measures each session's latency.
 */
export async function closedLoop(
  session: (index: number) => Promise<void>,
  options: { concurrency: number; durationMs: number; maxSessions?: number },
): Promise<LoadResult> {
  const latencies: number[] = [];
  let started = 0;
  let failures = 0;
  const begin = now();
  const deadline = begin + options.durationMs;
  const max = options.maxSessions ?? Number.POSITIVE_INFINITY;
  let firstError: unknown;
  const worker = async () => {
    while (now() < deadline && started < max) {
      const index = started++;
      const t0 = now();
      try {
        await session(index);
        latencies.push(now() - t0);
      } catch (error) {
        failures += 1;
        firstError ??= error;
      }
    }
  };
  await Promise.all(Array.from({ length: options.concurrency }, worker));
  const seconds = (now() - begin) / 1000;
  if (failures > 0 && latencies.length === 0) throw firstError;
  if (firstError) process.stderr.write(`  ${failures} session(s) failed; first: ${String(firstError)}\n`);
  return {
    concurrency: options.concurrency,
    sessions: latencies.length,
    seconds,
    sessionsPerSecond: latencies.length / seconds,
    latencyMs: summarize(latencies),
    failures,
  };
}
