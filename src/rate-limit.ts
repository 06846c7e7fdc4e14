/** A rate: `perSecond` on average, `burst` at once. 0 per second is no limit. */
export interface Rate {
  readonly perSecond: number;
  readonly burst: number;
}

/** Token buckets by key, all at one rate. */
export interface RateLimiter {
  /** Takes one message of `key` from its bucket: false when the key sends faster than the rate allows. */
  take(key: string): boolean;
  /** Drops the buckets that have refilled: a quiet key costs no memory here. */
  prune(): void;
  /** Keys held. */
  size(): number;
}

/** Keys kept at most; refilled ones are dropped first, so a flood of new keys cannot grow memory. */
const MAX_KEYS = 50_000;

/**
 * Buckets per key (the generic cell rate algorithm: one number per key, the time at which its bucket would be full
 * again, in whole ms since the limiter was made, so a small integer). Pure but for the clock it is given.
 *
 * @example
 * const limiter = createRateLimiter({ perSecond: 10, burst: 20 }, () => Date.now());
 * if (!limiter.take('acme')) refuse();
 */
export function createRateLimiter(rate: Rate, now: () => number): RateLimiter {
  const epoch = now();
  const full = new Map<string, number>();
  const clock = () => Math.floor(now() - epoch);
  return {
    take(key) {
      if (rate.perSecond <= 0) return true;
      const time = clock();
      const interval = 1000 / rate.perSecond;
      const known = full.get(key);
      if (known === undefined && full.size >= MAX_KEYS) prune(full, time);
      const at = Math.max(known ?? time, time);
      // Room for one more when the bucket is not `burst` messages behind.
      if (at + interval - time > rate.burst * interval) return false;
      full.set(key, Math.ceil(at + interval));
      return true;
    },
    prune() {
      dropFull(full, clock());
    },
    size: () => full.size,
  };
}

/**
 * Reads a rate written `<per second>` or `<per second>:<burst>` (0: no limit; the burst defaults to twice the rate,
 * at least 1). Throws an Error naming `name` for anything else; `what` is counted per second in its message.
 *
 * @example
 * parseRate('AGENTBUS_MEMORY_TENANT_RATE', '50:100'); // { perSecond: 50, burst: 100 }
 */
export function parseRate(name: string, raw: string, what = 'requests'): Rate {
  const match = /^(\d+(?:\.\d+)?)(?::(\d+))?$/.exec(raw.trim());
  if (!match) throw new Error(`${name} must be <${what} per second> or <${what} per second>:<burst> (0: no limit), got ${JSON.stringify(raw)}`);
  const perSecond = Number(match[1]);
  const burst = match[2] === undefined ? Math.max(1, Math.ceil(perSecond * 2)) : Number(match[2]);
  if (perSecond > 0 && burst < 1) throw new Error(`${name}: the burst must be at least 1, got ${JSON.stringify(raw)}`);
  return { perSecond, burst };
}

/** Drops the keys whose bucket is full by now: their owners went quiet, and an unknown key starts full. */
function dropFull(full: Map<string, number>, time: number): void {
  for (const [key, at] of full) if (at <= time) full.delete(key);
}

/** Drops the full buckets; the oldest half of the keys when none is full. */
function prune(full: Map<string, number>, time: number): void {
  dropFull(full, time);
  if (full.size < MAX_KEYS) return;
  let drop = full.size / 2;
  for (const key of full.keys()) {
    if (drop-- <= 0) break;
    full.delete(key);
  }
}
