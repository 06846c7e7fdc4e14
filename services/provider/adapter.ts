import type { ChatMessage, ChunkBody, ToolSpec } from '../../src/protocol/index.ts';

/** What an adapter is asked to do: one model call. `model` is the part after `<provider>:`. */
export interface AdapterRequest {
  readonly requestId: string;
  readonly model: string;
  readonly messages: readonly ChatMessage[];
  readonly tools: readonly ToolSpec[];
  readonly maxTokens?: number;
  readonly temperature?: number;
  /**
   * The JSON Schema a final answer (one without tool calls) must match: sent as the API's native structured output
   * where the adapter has one. Tools are still offered; the runtime checks the answer either way.
   */
  readonly outputSchema?: Readonly<Record<string, unknown>>;
  /** The session the call belongs to, when the caller said. */
  readonly tenant?: string;
  readonly sessionId?: string;
  readonly turnId?: string;
}

/**
 * One LLM backend behind the provider service. `generate` yields `text-delta`, `tool-call` (arguments
 * whole and parsed) and `usage` chunks, then exactly one `done`; it throws a `ProviderError` (from
 * `src/errors.ts`, with `retryable` and `status`) on failure, and the signal's reason on abort. The
 * signal must reach the HTTP request.
 */
export interface ProviderAdapter {
  /** The model prefix this adapter serves: `openai`, `anthropic`, `ollama`, `scripted`, … */
  readonly name: string;
  generate(request: AdapterRequest, options: { signal: AbortSignal }): AsyncIterable<ChunkBody>;
  /** The state of the adapter's circuit breaker (`closed`, `open`, `half_open`), when it has one. */
  readonly circuit?: () => string;
}
