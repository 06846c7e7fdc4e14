import type { ChatMessage, ToolSpec } from '../../../src/protocol/index.ts';
import type { TokenCounter } from '../../../src/tokens.ts';
import type { PreparedRequest } from '../../../machines/index.ts';
import type { ConversationView } from './conversation.ts';

/** How context is fitted into a model's window. */
export interface ContextOptions {
  readonly systemPrompt: string;
  readonly contextWindow: number;
  /** Tokens kept free for the answer. */
  readonly maxOutputTokens: number;
  /** Share of the window kept free for token-count error. Default 0.1. */
  readonly safetyRatio?: number;
  /** Compact when the history passes this share of its budget. Default 0.8. */
  readonly compactTriggerRatio?: number;
  /**
   * Share of the budget that messages not counted yet may take in the window by their bounds (the `slack` of
   * `ConversationView.fit`), where the token counter can count them after the step's request went out
   * (`TokenCounter.later`). The window never passes the budget either way; with bounds in it, it may leave out
   * less than this share of older messages that exact counts would keep, until the next step. Default 0.01;
   * 0 takes every decision on exact counts.
   */
  readonly uncountedRatio?: number;
}

/** The result of Preparing. */
export interface PreparedContext {
  readonly request: PreparedRequest;
  readonly needsCompaction: boolean;
  /**
   * When compaction is due: the log sequence of the newest message to summarize; the summary replaces the
   * history's messages up to and including it (`ConversationView.summaryCut`), the newest always staying.
   */
  readonly compactThroughSeq: number;
  /**
   * Tokens of the whole history, as an upper bound that is exact against `budget`: over it exactly when the
   * counted history is. Compare it with `budget` only (the model choice does); it is not a count to show.
   */
  readonly historyTokens: number;
  readonly budget: number;
}

/**
 * Builds the provider request of a step: system prompt, rolling summary, tool schemas, and the newest
 * history that fits the budget. Tool results whose call was cut off are dropped, so the transcript the
 * model sees is always whole. The fit comes from the view, which moves its last fit on by the messages
 * added since, and the window is one slice of the view's messages. So a warm step costs O(new messages)
 * plus that slice, not O(history) nor O(messages that fit).
 *
 * Whether compaction is due and whether the history passes the budget (`historyTokens`) are the decisions
 * exact token counts give, but the view counts a message only when its bound cannot decide (see
 * {@link ConversationView}). So are the window and the compaction's cut, but for the newest messages the
 * counter can count later (`uncountedRatio`): up to that share of the budget, the window is fitted on their
 * bounds and they are counted after the request went out. Such a window never passes the budget; it may leave
 * out a few older messages that counts would keep (less than that share, besides one message), until the
 * next step takes them back. A history whose bounds fit under the compaction trigger is never counted.
 */
export function buildContext(input: {
  model: string;
  history: ConversationView;
  tools: readonly ToolSpec[];
  toolTokens: number;
  tokens: TokenCounter;
  options: ContextOptions;
}): PreparedContext {
  const { options, history, tokens } = input;
  const system = history.summary
    ? `${options.systemPrompt}\n\nSummary of the earlier conversation:\n${history.summary}`
    : options.systemPrompt;
  const systemMessage: ChatMessage = { role: 'system', content: system };
  const reserved =
    options.maxOutputTokens + Math.ceil(options.contextWindow * (options.safetyRatio ?? 0.1)) + tokens.countMessage(systemMessage) + input.toolTokens;
  const budget = Math.max(0, options.contextWindow - reserved);

  const length = history.length;
  const slack = Math.floor(budget * (options.uncountedRatio ?? 0.01));
  let fit = history.fit(budget, slack);
  // A short fit says nothing exact about the whole history: ask. Within the budget, the exact fit is the whole
  // history, and the question counted enough of it for the fit to find that.
  if (fit.short && !history.totalExceeds(budget)) fit = history.fit(budget, slack);
  const fitsWhole = fit.start === 0;
  // The newest message (the prompt or a tool result) always goes, even when it alone is too big.
  const start = fit.start === length && length > 0 ? length - 1 : fit.start;

  const kept = keptMessages(history, start, systemMessage);

  const trigger = budget * (options.compactTriggerRatio ?? 0.8);
  let compactThroughSeq = 0;
  if (length > 2 && exceeds(history, fitsWhole, budget, Math.max(trigger, budget / 2))) {
    // Summarize the oldest messages until the rest fits in half the budget (the newest one always stays):
    // the cut is just before the longest run of newest messages that fits in half the budget. The whole
    // history is over half the budget here, so that run never starts at the first message.
    const cut = Math.min(history.fit(budget / 2, slack).start - 1, length - 2);
    if (cut >= 0) compactThroughSeq = history.seq(cut);
  }
  return {
    request: { model: input.model, messages: kept, tools: input.tools },
    needsCompaction: compactThroughSeq > 0,
    compactThroughSeq,
    // Within the budget, the fit's sum (at most the budget); past it, any upper bound (over the budget).
    historyTokens: fitsWhole ? fit.used : history.totalBound(),
    budget,
  };
}

/**
 * Exactly whether the history's tokens pass `limit`. `fitsWhole` tells exactly whether they are within
 * `budget` (a short fit asked the view); for a limit on the other side of the budget the view settles it, counting no more
 * than it must. A function, not a closure: under tsx every closure made is given its name, at a cost per step.
 */
function exceeds(history: ConversationView, fitsWhole: boolean, budget: number, limit: number): boolean {
  return fitsWhole ? limit < budget && history.totalExceeds(limit) : limit <= budget || history.totalExceeds(limit);
}

/**
 * `head`, then messages `[start, length)` of the history less the tool results whose call is not among them.
 *
 * Within a turn the runtime logs a step's results right after its assistant message, with only other results
 * of that message between: `executeTools` appends one result per call, `finishTurn` closes the calls still
 * open (cancelled, failed, out of budget) before `turn.ended`, a resumed turn runs only the open calls of its
 * newest assistant message, and steer messages are logged by Preparing, after the step's results. The index
 * keeps each turn's messages together, and a prompt queued meanwhile after them. A summary takes the oldest
 * messages, which can leave the results of the step it cut, without their call, at the start of the
 * conversation. So only the leading results of a window can lack their call, and those are dropped.
 *
 * A log written some other way can break this (a result logged in another turn, or twice): the view notices
 * such a result as it places it ({@link ConversationView.resultsFollowCalls} is false), and then every result
 * is matched against the calls before it in the window.
 */
function keptMessages(history: ConversationView, start: number, head: ChatMessage): ChatMessage[] {
  const length = history.length;
  if (history.resultsFollowCalls) {
    let first = start;
    while (first < length && history.message(first).role === 'tool') first += 1;
    return history.messages(first, head);
  }
  const askedIds = new Set<string>();
  return history.messages(start, head).filter((message, index) => {
    if (index === 0) return true;
    if (message.role === 'assistant') for (const call of message.toolCalls ?? []) askedIds.add(call.id);
    return message.role !== 'tool' || askedIds.has(message.toolCallId);
  });
}
