import type { Logger } from '../../../src/logging.ts';
import { INVALID_ARGUMENTS_KEY } from '../../../src/protocol/index.ts';
import type { Scrubber } from '../../../src/scrub/index.ts';
import type { ChunkBody } from '../../../src/protocol/index.ts';
import type { AdapterRequest, ProviderAdapter } from '../adapter.ts';
import { streamWithFallback } from '../fallback-stream.ts';

/** The HTTP timeout of one SDK call when the provider's `timeoutMs` is not set: 10 minutes. */
export const DEFAULT_TIMEOUT_MS = 600_000;

/** Finish reasons as adapters report them in `done`, whatever the API called them. */
export const FinishReason = {
  stop: 'stop',
  length: 'length',
  toolCalls: 'tool_calls',
  contentFilter: 'content_filter',
} as const;
export type FinishReason = (typeof FinishReason)[keyof typeof FinishReason];

/**
 * Parses tool-call arguments streamed as JSON text. Empty text is `{}` (a tool without parameters);
 * text that is not JSON becomes `{ _invalidJson: text, _parseError: message }` rather than an error,
 * because one bad call must not fail the whole step.
 */
export function parseToolArguments(text: string): unknown {
  if (text.trim() === '') return {};
  try {
    return JSON.parse(text) as unknown;
  } catch (error) {
    return { [INVALID_ARGUMENTS_KEY]: text, _parseError: error instanceof Error ? error.message : String(error) };
  }
}

/** The logger shape both SDKs accept. */
export interface SdkLogger {
  error(message: string, ...rest: unknown[]): void;
  warn(message: string, ...rest: unknown[]): void;
  info(message: string, ...rest: unknown[]): void;
  debug(message: string, ...rest: unknown[]): void;
}

/**
 * Routes an SDK's own log lines to our pino logger: the message only, scrubbed by the adapter's scrubber
 * (whose configured secret is the adapter's key; the SDK calls synchronously, so its fast pass), at warn or
 * below. The SDKs' extra arguments (request details, raw SSE) are dropped so nothing unscrubbed reaches a log.
 */
export function bridgeSdkLogger(
  logger: { warn(object: object, message: string): void; debug(object: object, message: string): void } | undefined,
  scrubber: Pick<Scrubber, 'scrubSync'>,
): SdkLogger {
  const warn = (message: string) => logger?.warn({ source: 'sdk' }, scrubber.scrubSync(message));
  const debug = (message: string) => logger?.debug({ source: 'sdk' }, scrubber.scrubSync(message));
  return { error: warn, warn, info: debug, debug };
}

/** What {@link createStreamingAdapter} needs: the adapter's two calls of one request. */
export interface StreamingAdapterOptions {
  readonly name: string;
  readonly logger?: Logger | undefined;
  /** Default true: see `streamWithFallback`. */
  readonly streamFallback?: boolean | undefined;
  /** The debug line logged at the start of each call. */
  readonly callMessage: string;
  readonly stream: (request: AdapterRequest, signal: AbortSignal) => AsyncIterable<ChunkBody>;
  readonly complete: (request: AdapterRequest, signal: AbortSignal) => Promise<readonly ChunkBody[]>;
}

/** An adapter that streams each call and falls back to one plain call when the stream breaks before its first token. */
export function createStreamingAdapter(options: StreamingAdapterOptions): ProviderAdapter {
  const { name, logger } = options;
  return {
    name,
    async *generate(request, { signal }) {
      signal.throwIfAborted();
      logger?.debug({ provider: name, model: request.model, requestId: request.requestId }, options.callMessage);
      yield* streamWithFallback({
        provider: name,
        stream: () => options.stream(request, signal),
        complete: () => options.complete(request, signal),
        signal,
        enabled: options.streamFallback !== false,
        ...(logger ? { logger } : {}),
      });
    },
  };
}
