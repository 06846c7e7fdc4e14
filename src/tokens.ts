import { readFileSync } from 'node:fs';
import { createRequire } from 'node:module';
import { GptEncoding } from 'gpt-tokenizer/esm/GptEncoding';
import type { ChatMessage } from './protocol/index.ts';

/** Counts tokens of text and messages. */
export interface TokenCounter {
  /**
   * Tokens of a text: exact for ordinary text, an upper bound where exact counting would cost too much (long
   * runs of one kind of character, text past {@link EXACT_COUNT_CHARS}). Linear in the text's length.
   */
  count(text: string): number;
  /** Tokens of one chat message, with the per-message overhead of chat formats. */
  countMessage(message: ChatMessage): number;
  /**
   * A cheap upper bound of `countMessage(message)`, never below it, for deciding without counting whether
   * messages fit a budget. A counter without one is asked for exact counts only.
   */
  boundMessage?(message: ChatMessage): number;
  /**
   * Runs `work` once the current task is done, off the path of whoever waits for its result. The conversation
   * index takes this way the counts it chose not to wait for: with it, Preparing may decide a window on the
   * bounds of a step's new messages (a little short of older messages, never over budget) and count them
   * after the request has gone out, while the model answers. A counter without it has every decision taken on
   * counts.
   */
  later?(work: () => void): void;
  /**
   * The fewest tokens `countMessage` gives any message (its chat format's overhead): with the counts taken,
   * a lower bound of a long history's total that settles, without counting the rest, that it passes a limit.
   * Default 0.
   */
  readonly minMessageTokens?: number;
  /**
   * Loads the encoding and compiles the encoder's paths now (half a second or so), so that no later count,
   * in a turn, pays for it.
   */
  warmUp?(): void;
}

/** The encodings a counter can use. */
export type TokenEncoding = 'o200k_base' | 'cl100k_base';

/** Overhead of one chat message (role, separators), as OpenAI documents for its chat formats. */
const MESSAGE_OVERHEAD = 4;

/** Distinct system prompts whose counts are kept (a system prompt with a rolling summary is one per summary). */
const MAX_SYSTEM_COUNTS = 64;

/**
 * Characters of one text counted exactly; the rest is counted by its UTF-8 length, an upper bound. Byte-pair
 * encoding this much text takes about 20 ms of prose, but 200-300 ms of text whose pieces no cache holds
 * (random letters, random CJK ideographs), so the time budget ({@link TokenCounterOptions.exactMsPerWindow}),
 * not this limit, is what keeps one count inside 50 ms.
 */
export const EXACT_COUNT_CHARS = 64 * 1024;

/**
 * Text that takes the encoder's every path (letters of both cases, digits, punctuation, CJK, emoji, runs), so a
 * process can compile them before it serves: a first count of unusual text otherwise takes several times longer.
 */
const WARM_UP_TEXT = Array.from({ length: 64 }, (_, index) =>
  `The ${index} quick brown foxes jumped over 1,234 lazy dogs; résumé naïve 東京 中文 😀 ${'aBcDeF'.repeat(index % 7)} <|endoftext|> ${'=-'.repeat(20)} x${(index * 7919).toString(36)}Q\n`,
).join('');

/**
 * A pre-tokenizer piece is byte-pair encoded as a whole, in time quadratic in its length (60 KB of one letter
 * took minutes). The encodings split text into pieces at changes of character class, so a piece longer than
 * this is a run of letters, of punctuation or of white space, and such runs are counted in chunks of this size.
 */
const RUN_CHUNK = 32;

/** Slices of ordinary text handed to the encoder at once: about 6 ms at worst, so a budget can stop between them. */
const SLICE_CHARS = 4 * 1024;

/** The first characters of every text are counted exactly, whatever the time budget says. */
export const ALWAYS_EXACT_CHARS = 4 * 1024;
const LONG_RUN = /[\p{L}\p{M}]{32,}|[^\s\p{L}\p{M}\p{N}]{32,}|\s{32,}/gu;

/** Pieces whose merges a counter keeps: a small cache, since most pieces of a conversation are met once. */
const MERGE_CACHE_SIZE = 20_000;

const require = createRequire(import.meta.url);

/** Options of {@link createTokenCounter}. */
export interface TokenCounterOptions {
  /** Default `o200k_base`. */
  readonly encoding?: TokenEncoding;
  /**
   * Milliseconds of exact counting allowed per {@link TokenCounterOptions.windowMs} for text past its first
   * {@link ALWAYS_EXACT_CHARS} characters; past that, counts of long texts fall back to UTF-8 lengths (upper bounds)
   * until the window turns. Default 25 ms per 100 ms: no burst of counting holds the event loop for long, on any
   * machine, however loaded. `Infinity` counts every text exactly up to {@link EXACT_COUNT_CHARS}.
   */
  readonly exactMsPerWindow?: number;
  readonly windowMs?: number;
  /** Clock for the budget, in ms; default `performance.now`. */
  readonly now?: () => number;
  /**
   * Makes the exact counter of an encoding, called on the first count (default {@link gptTokenizerCount}). For
   * measuring another byte-pair encoder behind the same guards and budget (bench/lib/tokenizer-ab-main.ts).
   */
  readonly encoder?: (encoding: TokenEncoding) => (text: string) => number;
  /**
   * How {@link TokenCounter.later} runs work: default `setImmediate` (after the I/O callbacks and microtasks of the
   * current turn of the event loop, so after a request they sent went out). `null`: the counter has no `later`.
   */
  readonly later?: ((work: () => void) => void) | null;
}

/** An encoding's ranks as gpt-tokenizer takes them: one entry (a string, or its bytes) per rank. */
type Ranks = ReturnType<Parameters<typeof GptEncoding.getEncodingApi>[1]>;

/**
 * Where the compiled code finds the ranks as JSON, relative to itself: bin/build.js sets it (esbuild `define`) and
 * writes `dist/ranks/<encoding>.json`. Undefined in the sources.
 */
declare const AGENTBUS_BUILT_RANKS: string | undefined;

/** The folder of the ranks bin/build.js wrote as JSON for the compiled code; undefined when running the sources. */
function builtRanksDir(): URL | undefined {
  return typeof AGENTBUS_BUILT_RANKS === 'string' ? new URL(AGENTBUS_BUILT_RANKS, import.meta.url) : undefined;
}

/**
 * The ranks of `encoding`: from `<ranksDir>/<encoding>.json` when there is one (parsing JSON takes about a third
 * less CPU than compiling the package's 2.4 MB module of string literals, on every start of the runtime), else from
 * gpt-tokenizer's own module.
 */
export function loadRanks(encoding: TokenEncoding, ranksDir?: URL): Ranks {
  if (ranksDir) {
    try {
      // Not bus data: a file of the build, checked to be a list.
      const ranks: unknown = JSON.parse(readFileSync(new URL(`${encoding}.json`, ranksDir), 'utf8'));
      if (Array.isArray(ranks) && ranks.length > 0) return ranks as Ranks;
    } catch {
      // No such file (an encoding the build did not write): the package's module below.
    }
  }
  return (require(`gpt-tokenizer/cjs/bpeRanks/${encoding}`) as { default: Ranks }).default;
}

/**
 * Exact counts of `encoding` by `gpt-tokenizer`, ranks loaded now ({@link loadRanks}). Text that spells a special token
 * ('<|endoftext|>') is text a user or a tool wrote: counted as text, as providers tokenize message content (the
 * library's default throws, which failed every later step).
 */
export function gptTokenizerCount(encoding: TokenEncoding, ranksDir: URL | undefined = builtRanksDir()): (text: string) => number {
  const ranks = loadRanks(encoding, ranksDir);
  const encoder = GptEncoding.getEncodingApi(encoding, () => ranks);
  encoder.setMergeCacheSize(MERGE_CACHE_SIZE);
  const asText = { disallowedSpecial: new Set<string>() };
  return (text) => encoder.countTokens(text, asText);
}

/**
 * Creates a token counter on a tiktoken encoding (default `o200k_base`), byte-pair encoded by `gpt-tokenizer`:
 * js-tiktoken (the design's tokenizer) counts the same tokens but took 8 times the CPU on CJK text, past what
 * one count may take, and three times as long to load (docs/architecture.md, "Context building").
 * The encoding's ranks are loaded on the first count or by `warmUp()` (half a second and some memory): make one
 * counter per process and pass it around.
 */
export function createTokenCounter(options: TokenEncoding | TokenCounterOptions = {}): TokenCounter {
  const {
    encoding = 'o200k_base',
    exactMsPerWindow = 25,
    windowMs = 100,
    now = () => performance.now(),
    encoder: makeEncoder = gptTokenizerCount,
    later = runAfterThisTask,
  } = typeof options === 'string' ? { encoding: options } : options;
  let encoder: ((text: string) => number) | undefined;
  let windowStart = -Infinity;
  let spent = 0;
  const exact = (text: string): number => {
    encoder ??= makeEncoder(encoding);
    const started = now();
    try {
      return encoder(text);
    } finally {
      spent += now() - started;
    }
  };
  const allowance = (): boolean => {
    const time = now();
    if (time - windowStart >= windowMs) {
      windowStart = time;
      spent = 0;
    }
    return spent < exactMsPerWindow;
  };
  const count = (text: string): number => countLinear(text, exact, allowance);
  const warmUp = () => {
    for (let round = 0; round < 3; round++) count(WARM_UP_TEXT);
  };
  // The system prompt is the same text on every step of every turn: counted once per distinct text.
  const systemCounts = new Map<string, number>();
  return {
    count,
    warmUp,
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
    minMessageTokens: MESSAGE_OVERHEAD,
    ...(later ? { later } : {}),
  };
}

/** The default {@link TokenCounter.later}: the check phase of this turn of the event loop. */
function runAfterThisTask(work: () => void): void {
  setImmediate(work);
}

/**
 * Counts `text` with `exact` where that is cheap and bounds it where it is not, in time linear in the text's
 * length whatever the text:
 * - long runs of one character class are counted chunk by chunk, one token added per cut (merges cannot cross a
 *   cut, so the chunks take at least as many tokens as the whole run, but for what a cut parts);
 * - other text is counted in slices of at most {@link SLICE_CHARS}, cut before white space, one token added per cut;
 * - past {@link EXACT_COUNT_CHARS} characters, or once `allowance` says no (never within the first
 *   {@link ALWAYS_EXACT_CHARS}), every further character counts its UTF-8 length.
 */
export function countLinear(text: string, exact: (text: string) => number, allowance: () => boolean = () => true): number {
  if (text.length < RUN_CHUNK) return text.length === 0 ? 0 : exact(text);
  // Most texts: ASCII, one slice, no long run. Counted whole (the first slice never asks `allowance`), without the
  // closures below, which cost more than the scan; for ASCII the byte bound is the length.
  if (text.length <= SLICE_CHARS && text.length <= ALWAYS_EXACT_CHARS && asciiWithoutLongRun(text)) return Math.min(exact(text), text.length);
  let budget = EXACT_COUNT_CHARS;
  let total = 0;
  const take = (from: number, end: number): void => {
    total += exact(text.slice(from, end));
    budget -= end - from;
  };
  const mayCount = (): boolean => {
    if (budget > 0 && EXACT_COUNT_CHARS - budget >= ALWAYS_EXACT_CHARS && !allowance()) budget = 0;
    return budget > 0;
  };
  const part = (from: number, to: number): void => {
    while (from < to && mayCount()) {
      let end = Math.min(to, from + Math.min(SLICE_CHARS, budget));
      if (end < to) {
        end = cutBeforeSpace(text, from, end);
        // A cut can part what one token would have held: one token more keeps the count an upper bound.
        total += 1;
      }
      take(from, end);
      from = end;
    }
    if (from < to) total += Buffer.byteLength(text.slice(from, to), 'utf8');
  };
  let at = 0;
  // Runs matter only where counting is exact; past that everything is counted by bytes. Scanning is not free
  // (about 100 ns a character), so only the head that can be counted exactly is scanned.
  const head = text.length > EXACT_COUNT_CHARS + RUN_CHUNK ? text.slice(0, EXACT_COUNT_CHARS + RUN_CHUNK) : text;
  if (asciiWithoutLongRun(head)) {
    part(0, text.length);
    return total <= text.length ? total : Math.min(total, Buffer.byteLength(text, 'utf8'));
  }
  for (const run of head.matchAll(LONG_RUN)) {
    const start = run.index;
    part(at, start);
    const end = start + run[0].length;
    let chunk = start;
    while (chunk < end && mayCount()) {
      const next = splitPoint(text, Math.min(chunk + RUN_CHUNK, end), end);
      take(chunk, next);
      total += 1;
      chunk = next;
    }
    if (chunk < end) total += Buffer.byteLength(text.slice(chunk, end), 'utf8');
    at = end;
  }
  part(at, text.length);
  // No text has more tokens than UTF-8 bytes; the cuts' extra tokens must not make the count exceed that.
  return total <= text.length ? total : Math.min(total, Buffer.byteLength(text, 'utf8'));
}

/**
 * True when `text` is ASCII and holds no run that {@link LONG_RUN} would find: most messages, told by one pass over
 * their character codes in a fraction of the time the Unicode-class regex takes. False sends the text to the regex.
 */
function asciiWithoutLongRun(text: string): boolean {
  let kind = -1;
  let length = 0;
  for (let at = 0; at < text.length; at++) {
    const unit = text.charCodeAt(at);
    if (unit > 0x7f) return false;
    // The classes of LONG_RUN on ASCII: letters (\p{L}), white space (\s), neither nor a digit; digits end any run.
    const next =
      (unit >= 0x61 && unit <= 0x7a) || (unit >= 0x41 && unit <= 0x5a) ? 0 : unit === 0x20 || (unit >= 0x09 && unit <= 0x0d) ? 1 : unit >= 0x30 && unit <= 0x39 ? 2 : 3;
    if (next === kind) length += 1;
    else {
      kind = next;
      length = 1;
    }
    if (length >= RUN_CHUNK && kind !== 2) return false;
  }
  return true;
}

/** Where to end a slice `[from, end)`: before the last white space of its last 64 characters, else at `end`. */
function cutBeforeSpace(text: string, from: number, end: number): number {
  for (let at = end - 1; at > from && at >= end - 64; at--) {
    const unit = text.charCodeAt(at);
    if (unit === 0x20 || unit === 0x0a || unit === 0x09) return at;
  }
  return splitPoint(text, end, end + 1);
}

/** `at`, moved one on when it would split a surrogate pair, never past `limit`. */
function splitPoint(text: string, at: number, limit: number): number {
  if (at >= limit) return limit;
  const unit = text.charCodeAt(at - 1);
  return unit >= 0xd800 && unit <= 0xdbff ? at + 1 : at;
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
