import { TimeoutError } from './errors.ts';

/**
 * Settles like `promise`, or rejects with a `TimeoutError` naming `what` after `ms`: a bound on a wait whose
 * own timeout cannot be trusted to fire (a JetStream request caught in a reconnect), so that a loop awaiting
 * it (a heartbeat, a lease claim) can never stall for good.
 *
 * @example
 * await withTimeout(kv.put(key, value), 2000, `heartbeat ${key}`);
 */
export function withTimeout<T>(promise: Promise<T>, ms: number, what: string): Promise<T> {
  let timer: ReturnType<typeof setTimeout> | undefined;
  const expired = new Promise<never>((_resolve, reject) => {
    timer = setTimeout(() => reject(new TimeoutError(`${what}: no answer within ${ms} ms`, ms)), ms);
  });
  return Promise.race([promise, expired]).finally(() => clearTimeout(timer));
}
