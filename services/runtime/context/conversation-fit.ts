import type { ChatMessage } from '../../../src/protocol/index.ts';
import type { TokenCounter } from '../../../src/tokens.ts';

/** The suffix of a conversation that fits a budget: see `ConversationView.fit` (conversation.ts). */
export interface ConversationFit {
  readonly start: number;
  /** At least the tokens of messages `[start, length)` and at most the budget: their counts where taken, bounds elsewhere. */
  readonly used: number;
}

/** Fits kept per index: a step asks for its budget and half of it (compaction), twice when it escalates. */
const MAX_FITS = 4;

/**
 * A fit of messages `[start, end)` in `budget`, kept to be moved on as the conversation grows. `start` is
 * exact: message `start - 1` does not fit, by exact counts. `used` is the sum of the window's sizes and
 * `uncounted` how many of them are bounds; counting a message of the window updates both.
 */
export interface KeptFit {
  readonly budget: number;
  end: number;
  start: number;
  used: number;
  uncounted: number;
}

/**
 * The token side of a conversation index: what its messages cost, as far as anyone needed to know. Every
 * message has a size from the moment it is placed, a cheap upper bound of its count, and gets its exact count
 * (once) only when a question cannot be answered without it.
 */
export interface MessageSizes {
  readonly counter: TokenCounter | undefined;
  readonly messages: readonly ChatMessage[];
  /**
   * The size of message `i`: its exact token count when 0 or more, else minus an upper bound of it while it
   * is not counted yet. `Math.abs` of it is an upper bound either way.
   */
  readonly tokens: number[];
  /** Sum of every message's `Math.abs(size)`, and how many sizes are bounds. */
  known: number;
  uncounted: number;
  /** The fits asked for, one per budget, oldest first; undefined until the first. */
  fits: KeptFit[] | undefined;
}

/** A new message's size: minus its bound, or its count when the counter has no bound or the bound is 0. */
export function initialSize(counter: TokenCounter | undefined, message: ChatMessage): number {
  // Without a counter no view reads sizes (they throw first).
  if (!counter) return 0;
  if (!counter.boundMessage) return counter.countMessage(message);
  const bound = counter.boundMessage(message);
  return bound > 0 ? -bound : 0;
}

/** The exact count of message `at`, taken now if it was a bound; the running sums and the kept fits over it follow. */
export function countAt(sizes: MessageSizes, at: number): number {
  const size = sizes.tokens[at]!;
  if (size >= 0) return size;
  // A bound was taken, so there is a counter.
  const count = sizes.counter!.countMessage(sizes.messages[at]!);
  const gap = -size - count;
  sizes.tokens[at] = count;
  sizes.known -= gap;
  sizes.uncounted -= 1;
  if (sizes.fits) {
    for (const fit of sizes.fits) {
      if (fit.start <= at && at < fit.end) {
        fit.used -= gap;
        fit.uncounted -= 1;
      }
    }
  }
  return count;
}

/** Counts every message of `[0, end)` not counted yet and gives their exact total. */
export function countAll(sizes: MessageSizes, end: number): number {
  for (let at = end - 1; at >= 0 && sizes.uncounted > 0; at--) countAt(sizes, at);
  return totalBound(sizes, end);
}

/** An upper bound of the tokens of messages `[0, end)`: the running sum less the sizes past `end` (turns queued after a view). */
export function totalBound(sizes: MessageSizes, end: number): number {
  let total = sizes.known;
  for (let at = end; at < sizes.tokens.length; at++) total -= Math.abs(sizes.tokens[at]!);
  return total;
}

/** Exactly whether the tokens of messages `[0, end)` pass `limit`, counting them newest first only until the bounds of the rest settle it. */
export function totalExceeds(sizes: MessageSizes, end: number, limit: number): boolean {
  const { tokens } = sizes;
  let total = sizes.known;
  let uncounted = sizes.uncounted;
  for (let at = end; at < tokens.length; at++) {
    total -= Math.abs(tokens[at]!);
    if (tokens[at]! < 0) uncounted -= 1;
  }
  for (let at = end - 1; total > limit && uncounted > 0; at--) {
    const size = tokens[at]!;
    if (size >= 0) continue;
    total -= -size - countAt(sizes, at);
    uncounted -= 1;
  }
  return total > limit;
}

/**
 * The longest run of messages ending at `end` whose exact tokens sum to at most `budget` (see
 * `ConversationView.fit`). A fit of the same budget kept from before is moved on when the messages
 * grew at its end; anything else walks back from `end`. Either way a message is counted only where the
 * bounds cannot tell whether the next older one fits.
 */
export function fitBudget(sizes: MessageSizes, end: number, budget: number): ConversationFit {
  const { tokens } = sizes;
  const fits = (sizes.fits ??= []);
  let fit: KeptFit | undefined;
  for (const kept of fits) if (kept.budget === budget) fit = kept;
  if (fit && fit.end <= end) {
    // The view grew at its end since (every change before a fit's end drops it): add the new messages. While
    // the bounds fit, so do the counts, and no older message fitted before. Otherwise count the window, then
    // let go of the oldest while over budget. Counts are never negative, so the start only moves on.
    for (let at = fit.end; at < end; at++) {
      fit.used += Math.abs(tokens[at]!);
      if (tokens[at]! < 0) fit.uncounted += 1;
    }
    fit.end = end;
    if (fit.used > budget) {
      settle(sizes, fit, budget, 0, end);
      // Still over budget means every message of the window is counted.
      while (fit.used > budget && fit.start < end) fit.used -= tokens[fit.start++]!;
    }
    return { start: fit.start, used: fit.used };
  }
  if (fit) {
    // Kept for a longer view (of a turn queued after this one): start that budget over from here.
    fit.start = fit.end = end;
    fit.used = fit.uncounted = 0;
  } else {
    if (fits.length >= MAX_FITS) fits.shift();
    fit = { budget, end, start: end, used: 0, uncounted: 0 };
    fits.push(fit);
  }
  // Walk back from the newest message while the next older one fits: by bounds, or else by counts (its own
  // and, as far as needed, the window's). The fit is kept from the start, so counting updates its sums.
  let cursor = end;
  while (fit.start > 0) {
    const at = fit.start - 1;
    if (fit.used + Math.abs(tokens[at]!) > budget) {
      const count = countAt(sizes, at);
      cursor = settle(sizes, fit, budget, count, cursor);
      if (fit.used + count > budget) break;
    }
    fit.used += Math.abs(tokens[at]!);
    if (tokens[at]! < 0) fit.uncounted += 1;
    fit.start = at;
  }
  return { start: fit.start, used: fit.used };
}

/**
 * Counts the uncounted messages of `fit`'s window from `cursor` down (newest first) until `fit.used + extra`
 * is within `budget` or none is left, and gives back where it stopped: every message from there to the fit's
 * end is counted. A fit's newest messages are the ones most often not counted yet.
 */
function settle(sizes: MessageSizes, fit: KeptFit, budget: number, extra: number, cursor: number): number {
  while (fit.used + extra > budget && fit.uncounted > 0) {
    cursor -= 1;
    if (sizes.tokens[cursor]! < 0) countAt(sizes, cursor);
  }
  return cursor;
}
