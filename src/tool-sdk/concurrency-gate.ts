import { abortReason } from '../errors.ts';

/** A counting semaphore: at most `limit` holders at once, the rest wait in order. */
export interface ConcurrencyGate {
  /** Waits for a slot; resolves with its release function. Rejects with the signal's reason on abort. */
  acquire(options?: { signal?: AbortSignal }): Promise<() => void>;
  /** Slots in use. */
  readonly active: number;
  /** Waiters queued for a slot. */
  readonly waiting: number;
}

/**
 * Creates a gate with `limit` slots.
 *
 * @example
 * const gate = createConcurrencyGate(64);
 * const release = await gate.acquire({ signal });
 * try { await work(); } finally { release(); }
 */
export function createConcurrencyGate(limit: number): ConcurrencyGate {
  if (!Number.isInteger(limit) || limit < 1) throw new RangeError(`concurrency limit must be a positive integer, got ${limit}`);
  let active = 0;
  const waiters: Array<() => void> = [];

  function releaser(): () => void {
    let released = false;
    return () => {
      if (released) return;
      released = true;
      const next = waiters.shift();
      if (next) next();
      else active -= 1;
    };
  }

  return {
    get active() {
      return active;
    },
    get waiting() {
      return waiters.length;
    },
    acquire(options = {}) {
      const { signal } = options;
      if (signal?.aborted) return Promise.reject(abortReason(signal));
      if (active < limit) {
        active += 1;
        return Promise.resolve(releaser());
      }
      return new Promise((resolve, reject) => {
        // A released slot passes straight to the next waiter, so `active` stays the same.
        const grant = () => {
          signal?.removeEventListener('abort', onAbort);
          resolve(releaser());
        };
        const onAbort = () => {
          const index = waiters.indexOf(grant);
          if (index >= 0) waiters.splice(index, 1);
          reject(abortReason(signal!));
        };
        waiters.push(grant);
        signal?.addEventListener('abort', onAbort, { once: true });
      });
    },
  };
}
