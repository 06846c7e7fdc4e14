import type { ChatMessage, ToolSpec } from '../../src/protocol/index.ts';
import type { TokenCounter } from '../../src/tokens.ts';
import type { PreparedRequest } from '../../machines/index.ts';

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
 * model sees is always whole. `countAt(i)` returns the (cached) tokens of message i.
 */
export function buildContext(input: {
  model: string;
  messages: readonly ChatMessage[];
  seqs: readonly number[];
  summary: string | undefined;
  tools: readonly ToolSpec[];
  toolTokens: number;
  tokens: TokenCounter;
  countAt: (index: number) => number;
  options: ContextOptions;
}): PreparedContext {
  const { options, messages, tokens } = input;
  const system = input.summary
    ? `${options.systemPrompt}\n\nSummary of the earlier conversation:\n${input.summary}`
    : options.systemPrompt;
  const systemMessage: ChatMessage = { role: 'system', content: system };
  const reserved =
    options.maxOutputTokens + Math.ceil(options.contextWindow * (options.safetyRatio ?? 0.1)) + tokens.countMessage(systemMessage) + input.toolTokens;
  const budget = Math.max(0, options.contextWindow - reserved);

  let used = 0;
  let start = messages.length;
  let total = 0;
  for (let index = messages.length - 1; index >= 0; index--) {
    const size = input.countAt(index);
    total += size;
    if (start === index + 1 && used + size <= budget) {
      used += size;
      start = index;
    }
  }
  // The newest message (the prompt or a tool result) always goes, even when it alone is too big.
  if (start === messages.length && messages.length > 0) start = messages.length - 1;

  const kept: ChatMessage[] = [];
  const askedIds = new Set<string>();
  for (let index = start; index < messages.length; index++) {
    const message = messages[index]!;
    if (message.role === 'assistant') for (const call of message.toolCalls ?? []) askedIds.add(call.id);
    if (message.role === 'tool' && !askedIds.has(message.toolCallId)) continue;
    kept.push(message);
  }

  const trigger = budget * (options.compactTriggerRatio ?? 0.8);
  let compactThroughSeq = 0;
  if (total > trigger && messages.length > 2) {
    // Summarize the oldest messages until the rest fits in half the budget.
    let rest = total;
    for (let index = 0; index < messages.length - 1 && rest > budget / 2; index++) {
      rest -= input.countAt(index);
      compactThroughSeq = input.seqs[index] ?? compactThroughSeq;
    }
  }
  return {
    request: { model: input.model, messages: [systemMessage, ...kept], tools: input.tools },
    needsCompaction: compactThroughSeq > 0,
    compactThroughSeq,
    historyTokens: total,
    budget,
  };
}
