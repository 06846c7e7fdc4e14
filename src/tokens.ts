import { getEncoding } from 'js-tiktoken';
import type { Tiktoken } from 'js-tiktoken';
import type { ChatMessage } from './protocol/index.ts';

/** Counts tokens of text and messages. */
export interface TokenCounter {
  count(text: string): number;
  /** Tokens of one chat message, with the per-message overhead of chat formats. */
  countMessage(message: ChatMessage): number;
  /**
   * A cheap upper bound of `countMessage(message)`, never below it, for deciding without counting whether
   * messages fit a budget. A counter without one is asked for exact counts only.
   */
  boundMessage?(message: ChatMessage): number;
}

/** Overhead of one chat message (role, separators), as OpenAI documents for its chat formats. */
const MESSAGE_OVERHEAD = 4;

/** Distinct system prompts whose counts are kept (a system prompt with a rolling summary is one per summary). */
const MAX_SYSTEM_COUNTS = 64;

/**
 * Creates a token counter on a tiktoken encoding (default `o200k_base`). Loading an encoding takes a
 * moment and some memory, so make one per process and pass it around.
 */
export function createTokenCounter(encoding: 'o200k_base' | 'cl100k_base' = 'o200k_base'): TokenCounter {
  let encoder: Tiktoken | undefined;
  const count = (text: string): number => {
    if (text.length === 0) return 0;
    encoder ??= getEncoding(encoding);
    // Text that spells a special token ('<|endoftext|>') is text a user or a tool wrote: count it as text, as
    // providers tokenize message content. js-tiktoken's default would throw, and fail every later step.
    return encoder.encode(text, [], []).length;
  };
  // The system prompt is the same text on every step of every turn: counted once per distinct text.
  const systemCounts = new Map<string, number>();
  return {
    count,
    countMessage(message) {
      if (message.role === 'system') {
        let tokens = systemCounts.get(message.content);
        if (tokens === undefined) {
          tokens = MESSAGE_OVERHEAD + count(message.content);
          if (systemCounts.size >= MAX_SYSTEM_COUNTS) systemCounts.clear();
          systemCounts.set(message.content, tokens);
        }
        return tokens;
      }
      let tokens = MESSAGE_OVERHEAD + count(message.content);
      if (message.role === 'assistant' && message.toolCalls) {
        for (const call of message.toolCalls) tokens += count(call.name) + count(JSON.stringify(call.args ?? {}));
      }
      return tokens;
    },
    boundMessage,
  };
}

/**
 * `countMessage` with each text's UTF-8 length for its token count. Byte-level BPE (o200k, cl100k) splits a
 * text's UTF-8 bytes into tokens of one byte or more (a lone surrogate is the 3 bytes of U+FFFD both in
 * `Buffer.byteLength` and in the encoder's TextEncoder), and special tokens are counted as text, so a text
 * has at most as many tokens as bytes. About four times the count for English text, and hundreds of times cheaper to take.
 */
function boundMessage(message: ChatMessage): number {
  let bytes = MESSAGE_OVERHEAD + Buffer.byteLength(message.content, 'utf8');
  if (message.role === 'assistant' && message.toolCalls) {
    for (const call of message.toolCalls) bytes += Buffer.byteLength(call.name, 'utf8') + Buffer.byteLength(JSON.stringify(call.args ?? {}), 'utf8');
  }
  return bytes;
}

/** Known context windows in tokens, by `<provider>:<model>` or model name prefix. */
const CONTEXT_WINDOWS: ReadonlyArray<readonly [RegExp, number]> = [
  [/^scripted:/, 32_000],
  [/^anthropic:claude/, 200_000],
  [/^openai:gpt-4\.1/, 1_000_000],
  [/^openai:(gpt-5|o[0-9])/, 400_000],
  [/^openai:gpt-4o/, 128_000],
  [/^ollama:/, 32_000],
];

/** The context window of a model, or `fallback` when unknown. */
export function contextWindowOf(model: string, fallback = 128_000): number {
  for (const [pattern, tokens] of CONTEXT_WINDOWS) if (pattern.test(model)) return tokens;
  return fallback;
}
