import type { ChatMessage } from '../../../src/protocol/index.ts';
import type { TokenCounter } from '../../../src/tokens.ts';

/** The suffix of a conversation that fits a budget: see `ConversationView.fit` (conversation.ts). */
export interface ConversationFit {
  readonly start: number;
  /** At least the tokens of messages `[start, length)` and at most the budget: their counts where taken, bounds elsewhere. */
  readonly used: number;
  /**
   * Present (true) when the start was decided while some messages of the window were bounds, not counted yet
   * (at most `slack` tokens of bounds, see `ConversationView.fit`): the window never passes the budget, but it
   * may leave out older messages that exact counts would keep, less than `slack` tokens of them besides message
   * `start - 1`.
   * Absent, `start` is the exact one: message `start - 1` does not fit, by exact counts.
   */
  readonly short?: true;
}

/** Fits kept per index: a step asks for its budget and half of it (compaction), twice when it escalates. */
const MAX_FITS = 4;

/**
 * A fit of messages `[start, end)` in `budget`, kept to be moved on as the conversation grows. `used` is the
 * sum of the window's sizes, `uncounted` how many of them are bounds and `uncountedBounds` the sum of those
 * bounds; counting a message of the window updates all three. `start` is exact (message `start - 1` does not
 * fit, by exact counts) unless `short`: then the start was decided while bounds were in the window, and the
 * fit may take older messages back once they are counted.
 */
export interface KeptFit {
  readonly budget: number;
  end: number;
  start: number;
  used: number;
  uncounted: number;
  uncountedBounds: number;
  short: boolean;
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
  /** Sum of every message's `Math.abs(size)`, how many sizes are bounds, and the sum of those bounds. */
  known: number;
  uncounted: number;
  uncountedBounds: number;
  /** The fits asked for, one per budget, oldest first; undefined until the first. */
  fits: KeptFit[] | undefined;
  /** True while counts of short fits' windows are queued with the counter's `later` (one job at a time). */
  settling: boolean;
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
  sizes.uncountedBounds += size;
  if (sizes.fits) {
    for (const fit of sizes.fits) {
      if (fit.start <= at && at < fit.end) {
        fit.used -= gap;
        fit.uncounted -= 1;
        fit.uncountedBounds += size;
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
  let bounds = sizes.uncountedBounds;
  for (let at = end; at < tokens.length; at++) {
    const size = tokens[at]!;
    total -= Math.abs(size);
    if (size < 0) {
      uncounted -= 1;
      bounds += size;
    }
  }
  // Over the limit with every message not counted yet at the fewest tokens a message counts is over it, whatever
  // their counts: a long history is settled so without counting it.
  if (total - bounds + uncounted * (sizes.counter?.minMessageTokens ?? 0) > limit) return true;
  for (let at = end - 1; total > limit && uncounted > 0; at--) {
    const size = tokens[at]!;
    if (size >= 0) continue;
    total -= -size - countAt(sizes, at);
    uncounted -= 1;
  }
  return total > limit;
}

/**
 * The longest run of messages ending at `end` whose tokens sum to at most `budget` (see
 * `ConversationView.fit`). A fit of the same budget kept from before is moved on when the messages
 * grew at its end; anything else walks back from `end`. Either way a message is counted only where the
 * bounds cannot tell whether the next older one fits. When the counter can count later
 * (`TokenCounter.later`), only while the bounds not counted yet in the window sum to more than `slack`:
 * up to that, the fit is decided on them (it never passes the budget, but it may leave out older messages
 * that their counts would keep) and they are counted later, off the caller's path, after which the next
 * fit takes back what then fits. With `slack` 0, or no `later`, every decision is the one exact counts give.
 */
export function fitBudget(sizes: MessageSizes, end: number, budget: number, slack = 0): ConversationFit {
  const { tokens } = sizes;
  const allowed = sizes.counter?.later ? slack : 0;
  const fits = (sizes.fits ??= []);
  let fit: KeptFit | undefined;
  for (const kept of fits) if (kept.budget === budget) fit = kept;
  if (fit && fit.end <= end) {
    // The view grew at its end since (every change before a fit's end drops it): add the new messages. While
    // the sizes fit, so do the counts. Otherwise count the window (newest first, down to the slack), then let
    // go of the oldest while over budget. A start that was exact stays so: no older message fitted before, and
    // the window only grew; a short one may take older messages back, now that more of the window is counted.
    for (let at = fit.end; at < end; at++) {
      const size = tokens[at]!;
      fit.used += Math.abs(size);
      if (size < 0) {
        fit.uncounted += 1;
        fit.uncountedBounds -= size;
      }
    }
    fit.end = end;
    if (fit.used > budget) settle(sizes, fit, budget, 0, end, allowed);
    // Let go of the oldest while over budget, each on its count (taken while it is in the window, so that the
    // fit's sums follow; once counted it may fit after all). The start is then exact unless a message was let
    // go of while bounds were in the window (counting one of them later may let it back); a start that did not
    // move is what it was, and a short one may take older messages back.
    let dropped = false;
    let onBounds = false;
    while (fit.used > budget && fit.start < end) {
      if (tokens[fit.start]! < 0) {
        countAt(sizes, fit.start);
        if (fit.used <= budget) break;
      }
      if (fit.uncounted > 0) onBounds = true;
      fit.used -= tokens[fit.start]!;
      fit.start += 1;
      dropped = true;
    }
    if (dropped) fit.short = onBounds;
    else if (fit.short) walkBack(sizes, fit, budget, allowed);
  } else {
    if (fit) {
      // Kept for a longer view (of a turn queued after this one): start that budget over from here.
      fit.start = fit.end = end;
      fit.used = fit.uncounted = fit.uncountedBounds = 0;
    } else {
      if (fits.length >= MAX_FITS) fits.shift();
      fit = { budget, end, start: end, used: 0, uncounted: 0, uncountedBounds: 0, short: false };
      fits.push(fit);
    }
    walkBack(sizes, fit, budget, allowed);
  }
  if (!fit.short) return { start: fit.start, used: fit.used };
  settleLater(sizes);
  return { start: fit.start, used: fit.used, short: true };
}

/**
 * Walks `fit` back from its start while the next older message fits: by its bound, or else by counts (its own
 * and, as far as needed and down to `allowed` tokens of bounds, the window's). The fit is kept from the
 * start, so counting updates its sums.
 */
function walkBack(sizes: MessageSizes, fit: KeptFit, budget: number, allowed: number): void {
  const { tokens } = sizes;
  let cursor = fit.end;
  while (fit.start > 0) {
    const at = fit.start - 1;
    if (fit.used + Math.abs(tokens[at]!) > budget) {
      const count = countAt(sizes, at);
      cursor = settle(sizes, fit, budget, count, cursor, allowed);
      if (fit.used + count > budget) break;
    }
    const size = tokens[at]!;
    fit.used += Math.abs(size);
    if (size < 0) {
      fit.uncounted += 1;
      fit.uncountedBounds -= size;
    }
    fit.start = at;
  }
  fit.short = fit.start > 0 && fit.uncounted > 0;
}

/**
 * Counts the uncounted messages of `fit`'s window from `cursor` down (newest first) until `fit.used + extra`
 * is within `budget` or the bounds left sum to `allowed` at most, and gives back where it stopped: every
 * message from there to the fit's end is counted. A fit's newest messages are the ones most often not counted yet.
 */
function settle(sizes: MessageSizes, fit: KeptFit, budget: number, extra: number, cursor: number, allowed: number): number {
  // Every bound is at least 1 (a message bounded by 0 is counted as 0 when placed): bounds over `allowed` mean
  // an uncounted message below `cursor`.
  while (fit.used + extra > budget && fit.uncountedBounds > allowed) {
    cursor -= 1;
    if (sizes.tokens[cursor]! < 0) countAt(sizes, cursor);
  }
  return cursor;
}

/**
 * Queues, with the counter's `later`, the settling of the short fits (one job per index at a time): the bounds
 * a fit was decided on are counted after the caller got its answer, and the fit takes back the older messages
 * that then fit, so that the next caller finds it exact. The job reads the fits as they are when it runs (a
 * summary or an insertion may have dropped them since).
 */
function settleLater(sizes: MessageSizes): void {
  const counter = sizes.counter;
  if (!counter?.later || sizes.settling) return;
  sizes.settling = true;
  counter.later(() => settleShortFits(sizes));
}

/**
 * The job {@link settleLater} queues: walks each short fit back with no slack, which counts what it must (the
 * older message's count where its bound does not fit, the window's bounds while it does not fit by them) and
 * leaves the fit exact.
 */
function settleShortFits(sizes: MessageSizes): void {
  sizes.settling = false;
  try {
    for (const fit of sizes.fits ?? []) if (fit.short) walkBack(sizes, fit, fit.budget, 0);
  } catch {
    // A count that fails leaves its message a bound, and its fit short (never over budget). A fit that must
    // count it does so on its own path, where the error fails that step as it did before counts were taken later.
  }
}
