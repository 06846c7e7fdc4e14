import type { Logger } from './logging.ts';

/** What a refused message was, for the log: never the whole message, never a stack. */
export interface Refusal {
  readonly code: string;
  readonly message: string;
  readonly [field: string]: unknown;
}

/** Logs refusals at a bounded rate. */
export interface RefusalLog {
  /** Counts one refusal; the first of each interval is logged at once, the others in one summary line. */
  refused(refusal: Refusal): void;
  /** Logs what is counted and not logged yet, and stops the timer. */
  close(): void;
}

/** Options of {@link createRefusalLog}. */
export interface RefusalLogOptions {
  readonly logger: Logger;
  /** At most one line per interval, plus the first refusal of each. Default 10 s. */
  readonly intervalMs?: number;
  /** Words of the log line; default 'message refused'. */
  readonly what?: string;
}

/**
 * A log of refused input that a flood cannot turn into a flood of lines: the first refusal of an interval
 * is logged with its fields, the rest are counted by code and summed up once the interval is over, with one
 * of them as a sample. At most two lines per interval, whatever comes in.
 *
 * @example
 * const refusals = createRefusalLog({ logger });
 * refusals.refused({ code: 'invalid_input', message: 'not msgpack', tenant, sessionId });
 */
export function createRefusalLog(options: RefusalLogOptions): RefusalLog {
  const intervalMs = options.intervalMs ?? 10_000;
  const what = options.what ?? 'message refused';
  let timer: ReturnType<typeof setTimeout> | undefined;
  let counts = new Map<string, number>();
  let sample: Refusal | undefined;

  const flush = () => {
    timer = undefined;
    if (counts.size === 0) return;
    const byCode = Object.fromEntries(counts);
    const total = [...counts.values()].reduce((sum, count) => sum + count, 0);
    options.logger.warn({ refused: total, byCode, sample, intervalMs }, `${what}: ${total} more in the last ${Math.round(intervalMs / 1000)} s`);
    counts = new Map();
    sample = undefined;
    // The next interval starts with the next refusal, logged at once again.
  };

  return {
    refused(refusal) {
      if (!timer) {
        options.logger.warn(refusal, what);
        timer = setTimeout(flush, intervalMs);
        timer.unref?.();
        return;
      }
      counts.set(refusal.code, (counts.get(refusal.code) ?? 0) + 1);
      sample ??= refusal;
    },
    close() {
      if (timer) clearTimeout(timer);
      flush();
    },
  };
}
