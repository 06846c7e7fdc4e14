import { ErrorCode, ProviderError } from '../../src/errors.ts';
import type { Scrubber } from '../../src/scrub/index.ts';

/**
 * Error codes of provider failures, as they cross the bus in `error` and `retry` chunks. Codes the
 * rest of agentbus also knows are taken from {@link ErrorCode}, so the two cannot drift apart.
 */
export const ProviderErrorCode = {
  providerError: ErrorCode.providerError,
  rateLimited: ErrorCode.rateLimited,
  overloaded: 'overloaded',
  unauthorized: 'unauthorized',
  badRequest: 'bad_request',
  notFound: ErrorCode.notFound,
  connectionFailed: 'connection_failed',
  timeout: ErrorCode.timeout,
  streamInterrupted: ErrorCode.streamInterrupted,
  invalidResponse: 'invalid_response',
  circuitOpen: 'circuit_open',
  spendLimit: 'spend_limit',
} as const;
export type ProviderErrorCode = (typeof ProviderErrorCode)[keyof typeof ProviderErrorCode];

/**
 * A provider failure that carries the server's `retry-after` hint. It is a {@link ProviderError}
 * for everyone else; the resilience layer reads `retryAfterMs`.
 */
export class RetryAfterProviderError extends ProviderError {
  readonly retryAfterMs: number;
  constructor(
    code: string,
    message: string,
    options: { retryAfterMs: number; status?: number; provider?: string; retryable?: boolean; cause?: unknown },
  ) {
    super(code, message, options);
    this.name = 'RetryAfterProviderError';
    this.retryAfterMs = options.retryAfterMs;
  }
}

/** The server's wait hint in milliseconds, or undefined. */
export function retryAfterOf(error: unknown): number | undefined {
  return error instanceof RetryAfterProviderError ? error.retryAfterMs : undefined;
}

/** The error classes of an SDK built by Stainless (openai, @anthropic-ai/sdk): same shape, different classes. */
export interface SdkErrorClasses {
  readonly APIError: abstract new (...args: never[]) => Error & { readonly status: number | undefined; readonly headers: Headers | undefined; readonly error: unknown };
  readonly APIUserAbortError: abstract new (...args: never[]) => Error;
  readonly APIConnectionError: abstract new (...args: never[]) => Error;
  readonly APIConnectionTimeoutError: abstract new (...args: never[]) => Error;
}

/** Parses `retry-after-ms` or `retry-after` (seconds or an HTTP date) into milliseconds. */
export function parseRetryAfter(headers: Headers | undefined, now: number): number | undefined {
  if (!headers) return undefined;
  const milliseconds = Number.parseFloat(headers.get('retry-after-ms') ?? '');
  if (Number.isFinite(milliseconds) && milliseconds >= 0) return milliseconds;
  const value = headers.get('retry-after');
  if (value === null || value.trim() === '') return undefined;
  const seconds = Number(value);
  if (Number.isFinite(seconds) && seconds >= 0) return seconds * 1000;
  const date = Date.parse(value);
  return Number.isNaN(date) ? undefined : Math.max(0, date - now);
}

/** The `error.type` and `error.details.error_code` of an API error body, when present. */
function bodyFields(body: unknown): { type?: string; detailCode?: string; message?: string } {
  if (typeof body !== 'object' || body === null) return {};
  const record = body as Record<string, unknown>;
  const inner = typeof record.error === 'object' && record.error !== null ? (record.error as Record<string, unknown>) : record;
  const details = typeof inner.details === 'object' && inner.details !== null ? (inner.details as Record<string, unknown>) : {};
  const fields: { type?: string; detailCode?: string; message?: string } = {};
  if (typeof inner.type === 'string') fields.type = inner.type;
  else if (typeof inner.code === 'string') fields.type = inner.code;
  if (typeof details.error_code === 'string') fields.detailCode = details.error_code;
  if (typeof inner.message === 'string') fields.message = inner.message;
  return fields;
}

/** Code and retryability of an HTTP status plus an API error type. */
function classify(status: number | undefined, type: string | undefined, detailCode: string | undefined): { code: ProviderErrorCode; retryable: boolean } {
  if (detailCode === 'enforced_spend_limit_reached' || type === 'insufficient_quota') return { code: ProviderErrorCode.spendLimit, retryable: false };
  if (status === 529 || type === 'overloaded_error') return { code: ProviderErrorCode.overloaded, retryable: true };
  if (status === 429 || type === 'rate_limit_error') return { code: ProviderErrorCode.rateLimited, retryable: true };
  if (status === 401 || status === 403 || type === 'authentication_error' || type === 'permission_error') {
    return { code: ProviderErrorCode.unauthorized, retryable: false };
  }
  if (status === 404) return { code: ProviderErrorCode.notFound, retryable: false };
  if (status === 408) return { code: ProviderErrorCode.timeout, retryable: true };
  if (status === 409) return { code: ProviderErrorCode.providerError, retryable: true };
  if (status !== undefined && status >= 500) return { code: ProviderErrorCode.providerError, retryable: true };
  if (status !== undefined && status >= 400) return { code: ProviderErrorCode.badRequest, retryable: false };
  // An error event inside a stream carries no status; only its type says what happened.
  if (type === 'api_error' || type === 'server_error') return { code: ProviderErrorCode.providerError, retryable: true };
  return { code: ProviderErrorCode.providerError, retryable: false };
}

/**
 * Maps an error thrown by an SDK call to a {@link ProviderError}: status, code and `retryable` from
 * the HTTP status and error body, `retry-after` kept, message scrubbed by `scrubber`'s full pass (the
 * adapter's API key, and every secret secretlint or the fast pass finds). An abort
 * rethrows the signal's reason. Errors that are not SDK errors (a socket cut while reading the body,
 * malformed SSE) become `stream_interrupted`, retryable; with `beforeResponse` (the call that opens a
 * stream failed) they become `connection_failed`: nothing streamed, so it is no stream failure and the
 * stream fallback leaves it to the retry layer.
 */
export async function toProviderError(
  error: unknown,
  context: {
    provider: string;
    scrubber: Scrubber;
    signal: AbortSignal;
    classes: SdkErrorClasses;
    now: number;
    beforeResponse?: boolean;
  },
): Promise<Error> {
  const { provider, scrubber, signal, classes } = context;
  if (signal.aborted) return signalReason(signal);
  if (error instanceof ProviderError) return error;
  const scrub = (text: string) => scrubber.scrub(text);
  // The SDK error is kept as the cause only when scrubbing finds nothing in it, so a logged cause cannot leak a secret.
  const causeOf = async (candidate: unknown) => {
    if (!(candidate instanceof Error)) return undefined;
    const text = `${candidate.message}\n${candidate.stack ?? ''}\n${safeStringify((candidate as { error?: unknown }).error)}`;
    return (await scrubber.scrub(text)) === text ? candidate : undefined;
  };
  if (error instanceof classes.APIUserAbortError) {
    return new ProviderError(ErrorCode.cancelled, `${provider}: request aborted`, { provider, cause: await causeOf(error) });
  }
  if (error instanceof classes.APIConnectionTimeoutError) {
    return new ProviderError(ProviderErrorCode.timeout, `${provider}: request timed out`, { provider, retryable: true, cause: await causeOf(error) });
  }
  if (error instanceof classes.APIConnectionError) {
    const detail = error.cause instanceof Error ? `: ${error.cause.message}` : '';
    return new ProviderError(ProviderErrorCode.connectionFailed, await scrub(`${provider}: connection failed${detail}`), {
      provider,
      retryable: true,
      cause: await causeOf(error),
    });
  }
  if (error instanceof classes.APIError) {
    const fields = bodyFields(error.error);
    const { code, retryable } = classify(error.status, fields.type, fields.detailCode);
    const status = error.status;
    const message = await scrub(`${provider}: ${error.message}`);
    const retryAfterMs = parseRetryAfter(error.headers, context.now);
    const options = { provider, retryable, cause: await causeOf(error), ...(status === undefined ? {} : { status }) };
    return retryAfterMs === undefined
      ? new ProviderError(code, message, options)
      : new RetryAfterProviderError(code, message, { ...options, retryAfterMs });
  }
  const message = error instanceof Error ? error.message : String(error);
  const code = context.beforeResponse ? ProviderErrorCode.connectionFailed : ProviderErrorCode.streamInterrupted;
  return new ProviderError(code, await scrub(`${provider}: stream failed: ${message}`), {
    provider,
    retryable: true,
    cause: await causeOf(error),
  });
}

/** The signal's reason as thrown by `throwIfAborted`, always an Error. */
export function signalReason(signal: AbortSignal): Error {
  const reason: unknown = signal.reason;
  return reason instanceof Error ? reason : new DOMException(String(reason ?? 'aborted'), 'AbortError');
}

function safeStringify(value: unknown): string {
  try {
    return JSON.stringify(value) ?? '';
  } catch {
    return '';
  }
}
