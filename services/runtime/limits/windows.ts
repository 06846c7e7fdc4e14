/**
 * The arithmetic of the fleet-wide limits, pure: no NATS, no clock reads. The limits bucket holds one value per
 * counter; every node changes a value by compare-and-set on its revision, and the functions here say what the next
 * value is and whether a call may go.
 *
 * Spend: one key per tenant and period kind (`day`, `month`, UTC). The value names its period; a value of an earlier
 * period counts as empty and is overwritten by the first write of the new one, so no old key is left to clean up.
 *
 * Rates: a sliding window counter per limited model. The window of index `i` (`floor(now / windowMs)`) lives in slot
 * `i % 2`; the count of the previous window is weighed by the share of it still inside the last `windowMs`.
 */

/** A spend period: a UTC calendar day or month. */
export const SpendPeriod = { day: 'day', month: 'month' } as const;
export type SpendPeriod = (typeof SpendPeriod)[keyof typeof SpendPeriod];

/** One node's reservations in flight, summed, and until when they count (a node that died stops holding budget then). */
export interface SpendHold {
  readonly amount: number;
  readonly until: number;
}

/** A tenant's spend in one period, as stored. */
export interface SpendValue {
  /** `2026-11-29` for a day, `2026-11` for a month. */
  readonly period: string;
  /** What the calls that ended in this period cost, USD. */
  readonly spent: number;
  /** Reservations of calls in flight, by node id. */
  readonly holds: Readonly<Record<string, SpendHold>>;
}

/** The id of the period `now` falls in, and when it ends (epoch ms). */
export function periodAt(kind: SpendPeriod, now: number): { readonly id: string; readonly resetsAt: number } {
  const date = new Date(now);
  const year = date.getUTCFullYear();
  const month = date.getUTCMonth();
  const pad = (value: number) => String(value).padStart(2, '0');
  if (kind === SpendPeriod.month) return { id: `${year}-${pad(month + 1)}`, resetsAt: Date.UTC(year, month + 1, 1) };
  const day = date.getUTCDate();
  return { id: `${year}-${pad(month + 1)}-${pad(day)}`, resetsAt: Date.UTC(year, month, day + 1) };
}

/** The value as it stands in `period`: one of an earlier period is empty. */
export function currentSpend(value: SpendValue | undefined, period: string): SpendValue {
  return value && value.period === period ? value : { period, spent: 0, holds: {} };
}

/** The reservations that still count at `now`, summed. */
export function heldAmount(value: SpendValue, now: number): number {
  let total = 0;
  for (const hold of Object.values(value.holds)) if (hold.until > now) total += hold.amount;
  return total;
}

/** What counts against the limit before a call: what was spent, and what calls in flight hold. */
export function committedSpend(value: SpendValue | undefined, period: string, now: number): number {
  const current = currentSpend(value, period);
  return current.spent + heldAmount(current, now);
}

function withHold(holds: Readonly<Record<string, SpendHold>>, node: string, hold: SpendHold | undefined, now: number): Record<string, SpendHold> {
  const next: Record<string, SpendHold> = {};
  // A lapsed hold (its node died mid-call, or never settled) is dropped by whichever node writes next.
  for (const [id, other] of Object.entries(holds)) if (id !== node && other.until > now) next[id] = other;
  if (hold && hold.amount > 0) next[node] = hold;
  return next;
}

/**
 * The value after `node` reserved `amount` for a call, its hold counting until `until`; undefined (nothing to write)
 * when the period's committed spend has reached `limit` already.
 */
export function reserveSpend(
  value: SpendValue | undefined,
  change: { readonly period: string; readonly node: string; readonly amount: number; readonly until: number; readonly now: number; readonly limit: number },
): SpendValue | undefined {
  const current = currentSpend(value, change.period);
  if (current.spent + heldAmount(current, change.now) >= change.limit) return undefined;
  const own = current.holds[change.node];
  const held = own && own.until > change.now ? own.amount : 0;
  return { period: change.period, spent: current.spent, holds: withHold(current.holds, change.node, { amount: held + change.amount, until: change.until }, change.now) };
}

/**
 * The value after a call of `node` ended: its `cost` is added to the period it ends in, and the `reserved` amount it
 * held is given back when the hold is still of this period (a call that crossed midnight held yesterday's budget).
 */
export function settleSpend(
  value: SpendValue | undefined,
  change: { readonly period: string; readonly reservedIn: string; readonly node: string; readonly reserved: number; readonly cost: number; readonly now: number },
): SpendValue {
  const current = currentSpend(value, change.period);
  const own = current.holds[change.node];
  let hold = own && own.until > change.now ? own : undefined;
  if (hold && change.reservedIn === change.period) hold = { amount: Math.max(0, hold.amount - change.reserved), until: hold.until };
  // Float sums drift: a hold of a billionth of a cent is none.
  if (hold && hold.amount < 1e-12) hold = undefined;
  return { period: change.period, spent: current.spent + Math.max(0, change.cost), holds: withHold(current.holds, change.node, hold, change.now) };
}

// --- Rates ------------------------------------------------------------------------------------------------------

/** One window's count of a rate limit, as stored (slot `index % 2`). */
export interface RateWindow {
  readonly index: number;
  readonly requests: number;
  readonly tokens: number;
}

/** A rate limit: requests and tokens per window (a minute unless configured otherwise). */
export interface RateLimit {
  readonly requests?: number;
  readonly tokens?: number;
  readonly windowMs: number;
}

/** The index of the window `now` falls in. */
export function windowIndex(now: number, windowMs: number): number {
  return Math.floor(now / windowMs);
}

/** The counts of window `index` from the value in its slot: zero when the slot holds another window. */
function countsOf(slot: RateWindow | undefined, index: number): { requests: number; tokens: number } {
  return slot && slot.index === index ? { requests: slot.requests, tokens: slot.tokens } : { requests: 0, tokens: 0 };
}

/**
 * How long from `now` until `cost` more fits under `limit`, given the previous window's count `previous` and the
 * current one's `current`: 0 when it fits now, Infinity when it never will (the cost alone is above the limit).
 * The previous window's weight falls linearly over the current window, so the wait may end inside it; when the
 * current count alone leaves no room, the wait runs into the next window, whose previous count is this one's.
 */
export function timeUntilRoom(limit: number, previous: number, current: number, cost: number, now: number, windowMs: number): number {
  if (cost > limit) return Infinity;
  const start = windowIndex(now, windowMs) * windowMs;
  let at: number;
  if (current + cost <= limit) {
    if (previous <= 0) return 0;
    // previous * (1 - f) + current + cost <= limit  ⇔  f >= 1 - (limit - cost - current) / previous
    at = start + windowMs * Math.max(0, 1 - (limit - cost - current) / previous);
  } else {
    at = start + windowMs + windowMs * Math.max(0, 1 - (limit - cost) / current);
  }
  return Math.max(0, Math.ceil(at - now));
}

/** Whether a call of `tokens` estimated tokens fits `limit` now, and if not how long to wait and which figure binds. */
export function rateDecision(
  limit: RateLimit,
  slots: readonly [RateWindow | undefined, RateWindow | undefined],
  tokens: number,
  now: number,
): { readonly waitMs: number; readonly binding?: 'requests' | 'tokens' } {
  const index = windowIndex(now, limit.windowMs);
  const previous = countsOf(slots[(index - 1) & 1], index - 1);
  const current = countsOf(slots[index & 1], index);
  const byRequests = limit.requests === undefined ? 0 : timeUntilRoom(limit.requests, previous.requests, current.requests, 1, now, limit.windowMs);
  const byTokens = limit.tokens === undefined ? 0 : timeUntilRoom(limit.tokens, previous.tokens, current.tokens, tokens, now, limit.windowMs);
  if (byRequests === 0 && byTokens === 0) return { waitMs: 0 };
  return byRequests >= byTokens ? { waitMs: byRequests, binding: 'requests' } : { waitMs: byTokens, binding: 'tokens' };
}

/** The current window's value after a call was counted in it (`requests` 1 when booking, 0 when settling tokens). */
export function countInWindow(slot: RateWindow | undefined, index: number, requests: number, tokens: number): RateWindow {
  const counts = countsOf(slot, index);
  return { index, requests: counts.requests + requests, tokens: Math.max(0, counts.tokens + tokens) };
}
