import type { Logger } from '../logging.ts';
import type { ServedTools } from './served-tools.ts';

/** Workers that a changed tool list replaced, stopping in the background while their running calls finish. */
export interface RetiringWorkers {
  /** Starts stopping `worker`, letting its running calls finish for `graceMs`; does not wait for it. */
  retire(worker: ServedTools, graceMs: number): void;
  /**
   * Waits until every retiring worker stopped, those retired meanwhile too, cutting their grace to `graceMs` from
   * now: a shutdown takes its own grace, not the longest timeout of a replaced tool.
   */
  settle(graceMs: number, also?: Promise<unknown>): Promise<void>;
}

/**
 * Creates the set of retiring workers of a bridge. Their stops run outside the bridge's update queue, so neither the
 * next list, nor a restart, nor the bridge's stop waits for a replaced worker's long calls.
 *
 * @example
 * const retiring = createRetiringWorkers(logger);
 * retiring.retire(previous, 60_000);
 * // on stop
 * await retiring.settle(5_000);
 */
export function createRetiringWorkers(logger: Logger): RetiringWorkers {
  const stopping = new Set<Promise<void>>();
  const cut = new AbortController();
  return {
    retire(worker, graceMs) {
      const done: Promise<void> = worker
        .stop({ graceMs, signal: cut.signal })
        .catch((err: unknown) => logger.warn({ err }, 'stopping a replaced tool worker failed'))
        .finally(() => stopping.delete(done));
      stopping.add(done);
    },
    async settle(graceMs, also) {
      const timer = setTimeout(() => cut.abort(new Error('agentbus mcp is stopping')), graceMs);
      try {
        await also;
        while (stopping.size > 0) await Promise.all([...stopping]);
      } finally {
        clearTimeout(timer);
      }
    },
  };
}
