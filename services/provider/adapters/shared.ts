/** Finish reasons as adapters report them in `done`, whatever the API called them. */
export const FinishReason = {
  stop: 'stop',
  length: 'length',
  toolCalls: 'tool_calls',
  contentFilter: 'content_filter',
} as const;
export type FinishReason = (typeof FinishReason)[keyof typeof FinishReason];

/**
 * The key under which unparseable tool-call arguments are passed on: the model's raw text is kept
 * so the runtime can answer with an `isError` tool result that shows the model what it sent.
 */
export const INVALID_ARGUMENTS_KEY = '_invalidJson';

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
 * Routes an SDK's own log lines to our pino logger: the message only, scrubbed, at warn or below. The
 * SDKs' extra arguments (request details, raw SSE) are dropped so nothing unscrubbed reaches a log.
 */
export function bridgeSdkLogger(
  logger: { warn(object: object, message: string): void; debug(object: object, message: string): void } | undefined,
  scrub: (text: string) => string,
): SdkLogger {
  const warn = (message: string) => logger?.warn({ source: 'sdk' }, scrub(message));
  const debug = (message: string) => logger?.debug({ source: 'sdk' }, scrub(message));
  return { error: warn, warn, info: debug, debug };
}
