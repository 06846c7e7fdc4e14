import { z } from 'zod';
import { SpendLimitError } from '../../../src/errors.ts';
import type { LimitsConfig, RateRule } from './limits-config.ts';
import { rateRulesFor, spendRuleFor } from './limits-config.ts';
import type { LimitCells } from './limit-cells.ts';
import { SpendPeriod, committedSpend, countInWindow, currentSpend, periodAt, rateDecision, reserveSpend, settleSpend, windowIndex } from './windows.ts';
import type { RateLimit, RateWindow, SpendValue } from './windows.ts';

const spendSchema: z.ZodType<SpendValue> = z.object({
  period: z.string(),
  spent: z.number(),
  holds: z.record(z.string(), z.object({ amount: z.number(), until: z.number() })),
});
const windowSchema: z.ZodType<RateWindow> = z.object({ index: z.number(), requests: z.number(), tokens: z.number() });

/** The window of the per-minute figures. */
export const RATE_WINDOW_MS = 60_000;

/** A call's place in one rate limit's window, kept to correct its tokens once they are known. */
interface RateBooking {
  readonly key: string;
  readonly index: number;
  readonly limited: boolean;
}

/** A call's reservation in one spend period. */
interface SpendBooking {
  readonly key: string;
  readonly kind: SpendPeriod;
  readonly period: string;
  readonly amount: number;
}

/** What a call holds until it is settled. */
export interface LimitTicket {
  readonly model: string;
  readonly tokens: number;
  readonly rates: readonly RateBooking[];
  readonly spend: readonly SpendBooking[];
}

/** A rate limit that has no room now: how long until it has, and what to tell the caller. */
export interface RateWait {
  readonly waitMs: number;
  /** Names the limit, its figure and the wait, for a `retry` event or the error a step fails with. */
  readonly message: string;
}

/**
 * The fleet-wide limits as one node applies them, over the limits bucket ({@link LimitCells}). A provider call
 * reserves an estimate of its cost in its tenant's spend periods and counts in its model's rate windows before it
 * is made, and is settled with what it cost and used once it ended; a prompt is refused once its tenant spent a limit.
 */
export interface FleetLimits {
  /** Rejects with a {@link SpendLimitError} when the tenant's spend in a period reached its limit. */
  checkPrompt(tenant: string): Promise<void>;
  /**
   * Reserves the call's estimated cost in each spend period of its tenant (rejects with a {@link SpendLimitError} when
   * a period has no budget left), then counts it in each rate limit of its model: resolves with the ticket, or with
   * the wait before it may try again (its spend reservation given back).
   */
  acquire(call: { readonly tenant?: string; readonly model: string; readonly tokens: number }): Promise<{ readonly ticket: LimitTicket } | RateWait>;
  /** Adds the call's cost to its tenant's spend, gives its reservation back, and corrects its tokens in its rate windows. */
  settle(ticket: LimitTicket, outcome: { readonly cost: number; readonly tokens: number }): Promise<void>;
}

/** Options of {@link createFleetLimits}. */
export interface FleetLimitsOptions {
  readonly cells: LimitCells;
  readonly config: LimitsConfig;
  readonly nodeId: string;
  readonly now: () => number;
  /** How long a reservation counts when its call is never settled (its node died): past the longest call. */
  readonly holdMs: number;
  /** The window of the rate limits; {@link RATE_WINDOW_MS} but in tests. */
  readonly rateWindowMs?: number;
}

/** A KV key token for a model name (`openai:gpt-5.4-mini` → `openai.gpt-5=2E4-mini`; `openai:*` → `openai.=2A`). */
export function modelKey(model: string): string {
  const colon = model.indexOf(':');
  const encode = (part: string) => part.replace(/[^A-Za-z0-9_-]/g, (char) => `=${char.codePointAt(0)!.toString(16).toUpperCase().padStart(2, '0')}`);
  return `${encode(model.slice(0, colon))}.${encode(model.slice(colon + 1)) || '=00'}`;
}

const money = (usd: number) => `${Number(usd.toFixed(6))} USD`;
const periodWord = (kind: SpendPeriod) => (kind === SpendPeriod.day ? 'daily' : 'monthly');

/** @example const limits = createFleetLimits({ cells, config, nodeId, now: Date.now, holdMs: 11 * 60_000 }); */
export function createFleetLimits(options: FleetLimitsOptions): FleetLimits {
  const { cells, config, nodeId, now } = options;
  const windowMs = options.rateWindowMs ?? RATE_WINDOW_MS;
  // The cost of the last call of each model settled on this node: the estimate a call of it reserves.
  const lastCost = new Map<string, number>();
  const spendKey = (tenant: string, kind: SpendPeriod) => `spend.${tenant}.${kind}`;
  const rateKey = (rule: RateRule, slot: number) => `rate.${modelKey(rule.model)}.${slot}`;
  const limitOf = (rule: RateRule): RateLimit => ({
    ...(rule.requestsPerMinute === undefined ? {} : { requests: rule.requestsPerMinute }),
    ...(rule.tokensPerMinute === undefined ? {} : { tokens: rule.tokensPerMinute }),
    windowMs,
  });

  function periodsOf(tenant: string): { kind: SpendPeriod; limit: number }[] {
    const rule = spendRuleFor(config.spend, tenant);
    if (!rule) return [];
    return [
      ...(rule.day === undefined ? [] : [{ kind: SpendPeriod.day, limit: rule.day }]),
      ...(rule.month === undefined ? [] : [{ kind: SpendPeriod.month, limit: rule.month }]),
    ];
  }

  function refusal(tenant: string, kind: SpendPeriod, limit: number, spent: number, at: number, what: string): SpendLimitError {
    const { resetsAt } = periodAt(kind, at);
    return new SpendLimitError(
      `tenant ${tenant} has reached its ${periodWord(kind)} spend limit of ${money(limit)} (AGENTBUS_SPEND_LIMITS): ${money(spent)} ${what} this ${kind}; it resets at ${new Date(resetsAt).toISOString()}`,
      { tenant, period: kind, limit, spent, resetsAt },
    );
  }

  function estimate(model: string): number {
    const known = lastCost.get(model);
    if (known !== undefined) return known;
    let highest = 0;
    for (const cost of lastCost.values()) highest = Math.max(highest, cost);
    return highest;
  }

  /** Gives reservations back (their periods' keys written at once: one round trip, not one per period). */
  async function release(bookings: readonly SpendBooking[]): Promise<void> {
    await Promise.all(
      bookings.map((booking) => {
        const at = now();
        return cells.change(booking.key, spendSchema, (value) =>
          settleSpend(value, { period: periodAt(booking.kind, at).id, reservedIn: booking.period, node: nodeId, reserved: booking.amount, cost: 0, now: at }),
        );
      }),
    );
  }

  async function reserve(tenant: string, model: string): Promise<SpendBooking[]> {
    const amount = estimate(model);
    const at = now();
    // The periods are written side by side; a period that refuses has the others' reservations given back.
    const outcomes = await Promise.all(
      periodsOf(tenant).map(async ({ kind, limit }) => {
        const period = periodAt(kind, at).id;
        const key = spendKey(tenant, kind);
        const change = await cells.change(key, spendSchema, (value) => reserveSpend(value, { period, node: nodeId, amount, until: at + options.holdMs, now: at, limit }));
        return { booking: { key, kind, period, amount }, change, limit };
      }),
    );
    const refused = outcomes.find((outcome) => !outcome.change.written);
    if (refused) {
      await release(outcomes.filter((outcome) => outcome.change.written).map((outcome) => outcome.booking));
      const { booking, change, limit } = refused;
      throw refusal(tenant, booking.kind, limit, committedSpend(change.value, booking.period, at), at, 'spent or held by calls in flight');
    }
    return outcomes.map((outcome) => outcome.booking);
  }

  /** Counts the call in each rate window of its model; the wait when one has no room (those counted are kept: rare). */
  async function book(model: string, tokens: number): Promise<RateBooking[] | RateWait> {
    const booked: RateBooking[] = [];
    for (const rule of rateRulesFor(config.rates, model)) {
      const limit = limitOf(rule);
      const at = now();
      const index = windowIndex(at, windowMs);
      const previousKey = rateKey(rule, (index - 1) & 1);
      const currentKey = rateKey(rule, index & 1);
      let previous = await cells.peek(previousKey, windowSchema);
      let wait: { waitMs: number; binding?: 'requests' | 'tokens' } = { waitMs: 0 };
      let refreshed = false;
      for (;;) {
        const change = await cells.change(currentKey, windowSchema, (current) => {
          const slots: [RateWindow | undefined, RateWindow | undefined] = index & 1 ? [previous, current] : [current, previous];
          wait = rateDecision(limit, slots, tokens, at);
          return wait.waitMs === 0 ? countInWindow(current, index, 1, tokens) : undefined;
        });
        if (change.written) break;
        // The previous window may have been corrected since this node read it: once more on a fresh read.
        if (refreshed) {
          const figure = wait.binding === 'tokens' ? `${rule.tokensPerMinute} tokens` : `${rule.requestsPerMinute} requests`;
          const wider = rule.model === model ? '' : ` (the limit of ${rule.model})`;
          const message =
            wait.waitMs === Infinity
              ? `${model}: a call of about ${tokens} tokens is larger than the limit of ${figure} per minute${wider} (AGENTBUS_RATE_LIMITS)`
              : `${model} is at its fleet-wide limit of ${figure} per minute${wider} (AGENTBUS_RATE_LIMITS); room again in ${wait.waitMs} ms`;
          return { waitMs: wait.waitMs, message };
        }
        previous = await cells.read(previousKey, windowSchema);
        refreshed = true;
      }
      booked.push({ key: currentKey, index, limited: rule.tokensPerMinute !== undefined });
    }
    return booked;
  }

  return {
    async checkPrompt(tenant) {
      const periods = periodsOf(tenant);
      if (periods.length === 0) return;
      const at = now();
      const values = await Promise.all(periods.map(({ kind }) => cells.read(spendKey(tenant, kind), spendSchema)));
      periods.forEach(({ kind, limit }, position) => {
        const spent = currentSpend(values[position], periodAt(kind, at).id).spent;
        if (spent >= limit) throw refusal(tenant, kind, limit, spent, at, 'spent');
      });
    },
    async acquire({ tenant, model, tokens }) {
      // Spend and rates side by side: one round trip in all. A call refused its spend keeps its count in the rate
      // window (it was not made: the window is a little fuller than it need be, for one minute).
      const [spend, rates] = await Promise.allSettled([tenant === undefined ? Promise.resolve([]) : reserve(tenant, model), book(model, tokens)]);
      if (spend.status === 'rejected') throw spend.reason;
      if (rates.status === 'rejected') {
        await release(spend.value);
        throw rates.reason;
      }
      const booked = rates.value;
      if (!Array.isArray(booked)) {
        await release(spend.value);
        return booked as RateWait;
      }
      return { ticket: { model, tokens, rates: booked, spend: spend.value } };
    },
    async settle(ticket, outcome) {
      if (ticket.spend.length > 0) lastCost.set(ticket.model, Math.max(0, outcome.cost));
      const at = now();
      const correction = outcome.tokens - ticket.tokens;
      // Every key of the call at once: its settle costs one round trip, whatever the number of limits.
      await Promise.all([
        ...ticket.spend.map((booking) =>
          cells.change(booking.key, spendSchema, (value) =>
            settleSpend(value, { period: periodAt(booking.kind, at).id, reservedIn: booking.period, node: nodeId, reserved: booking.amount, cost: outcome.cost, now: at }),
          ),
        ),
        ...ticket.rates
          .filter((booking) => booking.limited && correction !== 0)
          .map((booking) => cells.change(booking.key, windowSchema, (slot) => (slot?.index === booking.index ? countInWindow(slot, booking.index, 0, correction) : undefined))),
      ]);
    },
  };
}
