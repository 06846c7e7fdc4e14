import { monitorEventLoopDelay } from 'node:perf_hooks';

/** Event-loop delay figures in milliseconds. */
export interface EventLoopDelayFigures {
  readonly p50Ms: number;
  readonly p99Ms: number;
  readonly maxMs: number;
  /** The longest delay since the monitor started. */
  readonly maxEverMs: number;
  /** How far back `p50Ms`, `p99Ms` and `maxMs` reach: the last full window and the one running. */
  readonly windowMs: number;
}

/** Watches how long this process's event loop is kept from running callbacks. */
export interface EventLoopDelayMonitor {
  figures(): EventLoopDelayFigures;
  stop(): void;
}

/** Options of {@link createEventLoopDelayMonitor}. */
export interface EventLoopDelayOptions {
  /** Sampling resolution; default 10 ms. */
  readonly resolutionMs?: number;
  /** Figures cover the last full window and the running one; default 10 s. */
  readonly windowMs?: number;
}

const toMs = (nanos: number) => Math.round(nanos / 10_000) / 100;

/**
 * Measures the event-loop delay of this process (`perf_hooks.monitorEventLoopDelay`): a service whose loop is
 * held by synchronous work cannot read its socket, and the server ends up cutting it as a slow consumer.
 *
 * @example
 * const delay = createEventLoopDelayMonitor();
 * delay.figures(); // { p50Ms: 10.1, p99Ms: 11.2, maxMs: 14.3, maxEverMs: 40.2, windowMs: 10000 }
 */
export function createEventLoopDelayMonitor(options: EventLoopDelayOptions = {}): EventLoopDelayMonitor {
  const resolution = options.resolutionMs ?? 10;
  const windowMs = options.windowMs ?? 10_000;
  const histogram = monitorEventLoopDelay({ resolution });
  histogram.enable();
  let last = { p50: 0, p99: 0, max: 0 };
  let maxEver = 0;
  const timer = setInterval(() => {
    last = { p50: histogram.percentile(50), p99: histogram.percentile(99), max: histogram.max };
    maxEver = Math.max(maxEver, histogram.max);
    histogram.reset();
  }, windowMs);
  timer.unref();
  // The histogram counts the sampling resolution in every delay: what is reported is the delay beyond it.
  const beyond = (nanos: number) => (nanos > 0 ? Math.max(0, toMs(nanos) - resolution) : 0);
  return {
    figures() {
      const running = histogram.count > 0 ? { p50: histogram.percentile(50), p99: histogram.percentile(99), max: histogram.max } : last;
      return {
        p50Ms: beyond(Math.max(last.p50, running.p50)),
        p99Ms: beyond(Math.max(last.p99, running.p99)),
        maxMs: beyond(Math.max(last.max, running.max)),
        maxEverMs: beyond(Math.max(maxEver, running.max)),
        windowMs,
      };
    },
    stop() {
      clearInterval(timer);
      histogram.disable();
    },
  };
}
