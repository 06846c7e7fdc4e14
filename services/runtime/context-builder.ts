import type { ChatMessage, ToolSpec } from '../../src/protocol/index.ts';
import type { TokenCounter } from '../../src/tokens.ts';
import type { PreparedRequest } from '../../machines/index.ts';
import type { ConversationView } from './transcript.ts';

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
}

/** The result of Preparing. */
export interface PreparedContext {
  readonly request: PreparedRequest;
  readonly needsCompaction: boolean;
  /** When compaction is due: summarize every message with a log sequence up to this one. */
  readonly compactThroughSeq: number;
  readonly historyTokens: number;
  readonly budget: number;
}

/**
 * Builds the provider request of a step: system prompt, rolling summary, tool schemas, and the newest
 * history that fits the budget. Tool results whose call was cut off are dropped, so the transcript the
 * model sees is always whole. The history is walked back from its newest message only as far as the budget
 * goes; its total (for compaction and `historyTokens`) is the view's running total, so a warm step costs
 * O(messages that fit), not O(history).
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
  let used = 0;
  let start = length;
  while (start > 0) {
    const size = history.tokens(start - 1);
    if (used + size > budget) break;
    used += size;
    start -= 1;
  }
  const total = start === 0 ? used : history.totalTokens();
  // The newest message (the prompt or a tool result) always goes, even when it alone is too big.
  if (start === length && length > 0) start = length - 1;

  const kept: ChatMessage[] = [systemMessage];
  const askedIds = new Set<string>();
  for (let index = start; index < length; index++) {
    const message = history.message(index);
    if (message.role === 'assistant') for (const call of message.toolCalls ?? []) askedIds.add(call.id);
    if (message.role === 'tool' && !askedIds.has(message.toolCallId)) continue;
    kept.push(message);
  }

  const trigger = budget * (options.compactTriggerRatio ?? 0.8);
  let compactThroughSeq = 0;
  if (total > trigger && total > budget / 2 && length > 2) {
    // Summarize the oldest messages until the rest fits in half the budget (the newest one always stays):
    // the cut is just before the longest run of newest messages that fits in half the budget.
    let rest = 0;
    let keep = length;
    while (keep > 1) {
      const size = history.tokens(keep - 1);
      if (rest + size > budget / 2) break;
      rest += size;
      keep -= 1;
    }
    const cut = Math.min(keep - 1, length - 2);
    if (cut >= 0) compactThroughSeq = history.seq(cut);
  }
  return {
    request: { model: input.model, messages: kept, tools: input.tools },
    needsCompaction: compactThroughSeq > 0,
    compactThroughSeq,
    historyTokens: total,
    budget,
  };
}
