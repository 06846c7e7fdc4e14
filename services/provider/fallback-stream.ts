import type { Logger } from '../../src/logging.ts';
import { ProviderError } from '../../src/errors.ts';
import type { ChunkBody } from '../../src/protocol/index.ts';
import { ProviderErrorCode } from './provider-errors.ts';

/** True for the chunks that show the model has answered: text and tool calls. */
export function isContentChunk(chunk: ChunkBody): boolean {
  return chunk.type === 'text-delta' || chunk.type === 'tool-call';
}

/**
 * True when a streaming call broke as a stream: the socket was cut while the body was read, the SSE
 * was malformed, or the stream ended before its final event. HTTP errors answered before the stream
 * began (429, 5xx, 401, …) are not stream failures: a plain completion would meet the same answer,
 * so they go to the resilience layer instead.
 */
function isStreamFailure(error: unknown): boolean {
  return error instanceof ProviderError && error.code === ProviderErrorCode.streamInterrupted;
}

/** What {@link streamWithFallback} needs: the streaming call, the plain call, and where to log. */
export interface StreamWithFallbackOptions {
  readonly provider: string;
  /** The streaming call, yielding chunks as they arrive. */
  readonly stream: () => AsyncIterable<ChunkBody>;
  /** One non-streaming call of the same request, its answer as chunks (ending with `done`). */
  readonly complete: () => Promise<readonly ChunkBody[]>;
  readonly signal: AbortSignal;
  readonly logger?: Logger;
  /** Off: stream failures are thrown as they are. Default on. */
  readonly enabled?: boolean;
}

/**
 * Runs the streaming call; when it fails as a stream before any text or tool call came out, makes one
 * non-streaming call and yields its answer instead. Once content has been yielded the failure is
 * thrown: repeating the call would repeat text the caller already has.
 *
 * @example
 * yield* streamWithFallback({ provider: 'openai', stream: () => streamChat(request), complete: () => completeChat(request), signal });
 */
export async function* streamWithFallback(options: StreamWithFallbackOptions): AsyncGenerator<ChunkBody, void, undefined> {
  let yieldedContent = false;
  try {
    for await (const chunk of options.stream()) {
      if (isContentChunk(chunk)) yieldedContent = true;
      yield chunk;
    }
    return;
  } catch (error) {
    options.signal.throwIfAborted();
    if (options.enabled === false || yieldedContent || !isStreamFailure(error)) throw error;
    options.logger?.warn({ err: error, provider: options.provider }, 'stream failed before its first token; falling back to a plain completion');
  }
  const chunks = await options.complete();
  options.signal.throwIfAborted();
  yield* chunks;
}
