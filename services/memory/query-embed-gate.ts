/** How long searches answer from full text at once after a query embedding came too late. */
export const SLOW_EMBEDDER_HOLD_MS = 5_000;
/** Meanwhile, one search in this many ms still waits for its embedding, to notice a quick embedder again. */
export const SLOW_EMBEDDER_PROBE_MS = 1_000;

/** One search's leave to wait for its query's embedding; `done` says what came of it. */
export interface QueryEmbedWaiting {
  readonly waitMs: number;
  done(now: number, embedded: boolean): void;
}

/** Decides which searches wait for their query's embedding, from how the embedder answered lately. */
export interface QueryEmbedGate {
  /**
   * Leave for a search received at `now` to wait up to `waitMs` for its query's embedding, or undefined: answer
   * from full text at once.
   */
  admit(now: number, waitMs: number): QueryEmbedWaiting | undefined;
}

/**
 * Every search waits for its query's embedding while the last one came in time. Otherwise (at the start, and after
 * one came too late) one search at a time waits, a probe, and the others answer from full text at once: a burst of
 * searches (200 sessions starting together) must not all wait for an embedder nobody has seen answer in time, since
 * their answers would then all come at the end of their callers' waits, where a loaded event loop on either side
 * makes them late. For {@link SLOW_EMBEDDER_HOLD_MS} after a late embedding the probes come one a second (the first at
 * once), then whenever none is in flight.
 */
export function createQueryEmbedGate(): QueryEmbedGate {
  let quick = false;
  let slowUntil = 0;
  let lastProbe = -Infinity;
  let probing = false;
  const settle = (now: number, embedded: boolean) => {
    quick = embedded;
    slowUntil = embedded ? 0 : now + SLOW_EMBEDDER_HOLD_MS;
  };
  return {
    admit(now, waitMs) {
      if (waitMs <= 0) return undefined;
      if (quick) return { waitMs, done: settle };
      if (probing) return undefined;
      if (now < slowUntil) {
        if (now - lastProbe < SLOW_EMBEDDER_PROBE_MS) return undefined;
        lastProbe = now;
      }
      probing = true;
      return {
        waitMs,
        done(at, embedded) {
          probing = false;
          settle(at, embedded);
        },
      };
    },
  };
}
