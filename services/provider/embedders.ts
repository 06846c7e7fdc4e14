import { stopwords as englishStopwords } from '@orama/stopwords/english';
import { AgentbusError, ErrorCode } from '../../src/errors.ts';
import type { Logger } from '../../src/logging.ts';
import { toProviderError } from './provider-errors.ts';
import { createScrubber } from '../../src/scrub/index.ts';
import { DEFAULT_RETRY, retryDelay, sleep } from './resilience.ts';
import type { RetryOptions } from './resilience.ts';
import type OpenAI from 'openai';
import { createOpenAIClient, openAISdkErrors } from './adapters/openai.ts';

/** One provider's embedding model(s), behind `agentbus.provider.<provider>.embed`. */
export interface EmbedAdapter {
  /** The provider it belongs to: `openai`, `ollama`, `scripted`, … */
  readonly name: string;
  /**
   * One L2-normalised vector per input, in order. `model` is the part after `<provider>:`, or the adapter's
   * default. Throws a `ProviderError` (with `retryable`) on failure, the signal's reason on abort.
   */
  embed(request: { readonly input: readonly string[]; readonly model?: string }, options: { signal: AbortSignal }): Promise<{ model: string; vectors: number[][] }>;
}

/** Scales a vector to length 1 (a zero vector stays as it is). */
export function normalize(vector: readonly number[]): number[] {
  let sum = 0;
  for (const value of vector) sum += value * value;
  const length = Math.sqrt(sum);
  return length === 0 ? [...vector] : vector.map((value) => value / length);
}

/** The default embedding model of an OpenAI-compatible provider by its name, when there is a usual one. */
export function defaultEmbedModel(provider: string): string | undefined {
  if (provider === 'openai') return 'text-embedding-3-small';
  if (provider === 'ollama') return 'nomic-embed-text';
  return undefined;
}

/** Options of {@link createOpenAIEmbedder}. */
export interface OpenAIEmbedderOptions {
  readonly name: string;
  readonly apiKey?: string;
  /** Default the OpenAI API (`OPENAI_BASE_URL` of the adapter); Ollama, vLLM and other compatible servers take their own. */
  readonly baseURL?: string;
  readonly defaultHeaders?: Readonly<Record<string, string>>;
  /** The model when a request names none; else {@link defaultEmbedModel}. */
  readonly defaultModel?: string;
  readonly timeoutMs?: number;
  readonly logger?: Logger;
  readonly now?: () => number;
}

/**
 * Embeddings through the official SDK's `embeddings.create` (`POST /embeddings`, `encoding_format: 'float'`):
 * OpenAI itself and every compatible server. The SDK's own retries are off; see {@link withEmbedRetries}.
 */
export function createOpenAIEmbedder(options: OpenAIEmbedderOptions): EmbedAdapter {
  const scrubber = createScrubber({ secrets: [options.apiKey], ...(options.logger ? { logger: options.logger } : {}) });
  const fallbackModel = options.defaultModel ?? defaultEmbedModel(options.name);
  const now = options.now ?? Date.now;
  // Made by the first call, which imports the SDK.
  let client: Promise<OpenAI> | undefined;
  return {
    name: options.name,
    async embed(request, { signal }) {
      const model = request.model ?? fallbackModel;
      if (!model) {
        throw new AgentbusError(ErrorCode.unsupported, `provider ${options.name} has no default embedding model: set AGENTBUS_EMBED_MODEL, or embedModel in its config`);
      }
      let response;
      try {
        client ??= createOpenAIClient(options, scrubber);
        response = await (await client).embeddings.create({ model, input: [...request.input], encoding_format: 'float' }, { signal });
      } catch (error) {
        throw await toProviderError(error, { provider: options.name, scrubber, signal, classes: await openAISdkErrors(), now: now(), beforeResponse: false });
      }
      const vectors: number[][] = new Array(request.input.length);
      for (const item of response.data) {
        if (item.index >= 0 && item.index < vectors.length) vectors[item.index] = normalize(item.embedding);
      }
      if (vectors.some((vector) => vector === undefined) || new Set(vectors.map((vector) => vector.length)).size !== 1) {
        throw new AgentbusError(ErrorCode.providerError, `provider ${options.name} answered ${response.data.length} embeddings of mixed or missing positions for ${request.input.length} inputs`, { retryable: false });
      }
      return { model: response.model || model, vectors };
    },
  };
}

/** The scripted embedder's dimension. */
export const SCRIPTED_EMBED_DIMENSIONS = 256;

/**
 * The offline `scripted` provider's embedder: deterministic feature hashing (FNV-1a) of lower-cased words and
 * of their character trigrams into {@link SCRIPTED_EMBED_DIMENSIONS} dimensions, normalised. Texts that share
 * words (but the commonest English ones), or parts of words (`kumquat`, `kumquats`), are close; the same text gives the same vector. A lexical
 * stand-in that lets the whole path run with no key, not a model of meaning.
 */
export function createScriptedEmbedder(name = 'scripted'): EmbedAdapter {
  return {
    name,
    async embed(request, { signal }) {
      signal.throwIfAborted();
      return { model: 'scripted-embed', vectors: request.input.map(hashEmbedding) };
    },
  };
}

/** Words too common to tell texts apart (Orama's English stop words); the scripted embedder leaves them out. */
const STOPWORDS = new Set(englishStopwords);

function hashEmbedding(text: string): number[] {
  const vector = new Array<number>(SCRIPTED_EMBED_DIMENSIONS).fill(0);
  const add = (feature: string, weight: number) => {
    const hash = fnv1a(feature);
    vector[hash % SCRIPTED_EMBED_DIMENSIONS]! += hash & 0x8000_0000 ? -weight : weight;
  };
  for (const word of text.toLowerCase().match(/[\p{L}\p{N}]+/gu) ?? []) {
    if (STOPWORDS.has(word)) continue;
    add(`w:${word}`, 1);
    const padded = `^${word}$`;
    for (let at = 0; at + 3 <= padded.length; at++) add(`t:${padded.slice(at, at + 3)}`, 0.5);
  }
  if (!vector.some((value) => value !== 0)) vector[0] = 1;
  return normalize(vector);
}

function fnv1a(text: string): number {
  let hash = 0x811c9dc5;
  for (let index = 0; index < text.length; index++) {
    hash ^= text.charCodeAt(index);
    hash = Math.imul(hash, 0x01000193) >>> 0;
  }
  return hash >>> 0;
}

/**
 * Retries an embedder's retryable failures (429 honouring `retry-after`, 5xx, connection resets, timeouts) with
 * the generate path's backoff; the wait ends when the signal aborts.
 */
export function withEmbedRetries(embedder: EmbedAdapter, options: { retry?: Partial<RetryOptions>; random?: () => number; sleep?: typeof sleep; logger?: Logger } = {}): EmbedAdapter {
  const retry: RetryOptions = { ...DEFAULT_RETRY, ...(Object.fromEntries(Object.entries(options.retry ?? {}).filter(([, value]) => value !== undefined)) as Partial<RetryOptions>) };
  const wait = options.sleep ?? sleep;
  return {
    name: embedder.name,
    async embed(request, { signal }) {
      for (let attempt = 1; ; attempt += 1) {
        try {
          return await embedder.embed(request, { signal });
        } catch (error) {
          if (signal.aborted || !(error instanceof AgentbusError) || !error.retryable || attempt >= retry.maxAttempts) throw error;
          const delayMs = retryDelay(attempt, error, retry, options.random ?? Math.random);
          if (delayMs === undefined) throw error;
          options.logger?.info({ provider: embedder.name, attempt: attempt + 1, delayMs, err: error }, 'retrying embeddings call');
          await wait(delayMs, { signal });
        }
      }
    },
  };
}
