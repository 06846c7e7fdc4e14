import { AgentbusError, ProviderError, toErrorData } from '../../src/errors.ts';
import type { Logger } from '../../src/logging.ts';
import type { ProviderAdapter } from './adapter.ts';
import { isContentChunk } from './fallback-stream.ts';
import { ProviderErrorCode, retryAfterOf, signalReason } from './provider-errors.ts';

/** How failed calls are retried. */
export interface RetryOptions {
  /** Attempts in all, the first one included. Default 4. */
  readonly maxAttempts: number;
  /** Backoff of the first retry; doubled for each further one. Default 500 ms. */
  readonly baseDelayMs: number;
  /** Cap of the backoff. Default 20 s. */
  readonly maxDelayMs: number;
  /** A `retry-after` longer than this is not waited for: the error is thrown at once. Default 60 s. */
  readonly maxRetryAfterMs: number;
}

/** When the circuit of a provider opens and closes again. */
export interface CircuitBreakerOptions {
  /** Consecutive failures that open the circuit. Default 5. */
  readonly failureThreshold: number;
  /** Time an open circuit waits before letting trial calls through (half-open). Default 30 s. */
  readonly resetTimeoutMs: number;
  /** Consecutive successes in half-open that close the circuit. Default 3. */
  readonly successThreshold: number;
}

/** Default retry policy. */
export const DEFAULT_RETRY: RetryOptions = Object.freeze({ maxAttempts: 4, baseDelayMs: 500, maxDelayMs: 20_000, maxRetryAfterMs: 60_000 });
/** Default circuit breaker settings. */
export const DEFAULT_CIRCUIT_BREAKER: CircuitBreakerOptions = Object.freeze({ failureThreshold: 5, resetTimeoutMs: 30_000, successThreshold: 3 });

/** The states of a circuit. */
export const CircuitState = { closed: 'closed', open: 'open', halfOpen: 'half_open' } as const;
export type CircuitState = (typeof CircuitState)[keyof typeof CircuitState];

/** A circuit breaker of one provider. */
export interface CircuitBreaker {
  readonly name: string;
  /** The state now; an open circuit past its reset timeout reads as half-open. */
  state(): CircuitState;
  /** Throws a {@link ProviderError} `circuit_open` (not retryable) when calls are not let through. */
  assertCallable(): void;
  recordSuccess(): void;
  recordFailure(): void;
}

/**
 * Creates a circuit breaker: closed until `failureThreshold` consecutive failures, then open (calls
 * fail fast) for `resetTimeoutMs`, then half-open (calls go through); `successThreshold` successes
 * close it, one failure opens it again.
 */
export function createCircuitBreaker(
  options: { name: string; now?: () => number; logger?: Logger } & Partial<CircuitBreakerOptions>,
): CircuitBreaker {
  const { failureThreshold, resetTimeoutMs, successThreshold } = options;
  const settings = { ...DEFAULT_CIRCUIT_BREAKER, ...definedOnly({ failureThreshold, resetTimeoutMs, successThreshold }) };
  const now = options.now ?? Date.now;
  let state: CircuitState = CircuitState.closed;
  let failures = 0;
  let successes = 0;
  let openedAt = 0;

  const moveTo = (next: CircuitState) => {
    if (next === state) return;
    options.logger?.warn({ provider: options.name, from: state, to: next }, `circuit ${next}`);
    state = next;
    failures = 0;
    successes = 0;
    if (next === CircuitState.open) openedAt = now();
  };
  const current = (): CircuitState => {
    if (state === CircuitState.open && now() - openedAt >= settings.resetTimeoutMs) moveTo(CircuitState.halfOpen);
    return state;
  };

  return {
    name: options.name,
    state: current,
    assertCallable() {
      if (current() !== CircuitState.open) return;
      const waitMs = Math.max(0, openedAt + settings.resetTimeoutMs - now());
      throw new ProviderError(
        ProviderErrorCode.circuitOpen,
        `${options.name}: circuit open after ${settings.failureThreshold} consecutive failures; trying again in ${Math.ceil(waitMs / 1000)} s`,
        { provider: options.name, retryable: false },
      );
    },
    recordSuccess() {
      const observed = current();
      if (observed === CircuitState.halfOpen) {
        successes += 1;
        if (successes >= settings.successThreshold) moveTo(CircuitState.closed);
      } else if (observed === CircuitState.closed) {
        failures = 0;
      }
    },
    recordFailure() {
      const observed = current();
      if (observed === CircuitState.halfOpen) {
        moveTo(CircuitState.open);
      } else if (observed === CircuitState.closed) {
        failures += 1;
        if (failures >= settings.failureThreshold) moveTo(CircuitState.open);
      }
    },
  };
}

/** True when a retry may help: an agentbus error flagged `retryable`. */
function isRetryable(error: unknown): boolean {
  return error instanceof AgentbusError && error.retryable;
}

/**
 * The wait before the retry that follows failed attempt `attempt` (1-based): the server's
 * `retry-after` when it sent one (undefined when that is over `maxRetryAfterMs`: do not retry),
 * otherwise exponential backoff with equal jitter, `[d/2, d]` for `d = min(maxDelayMs, baseDelayMs·2^(attempt-1))`.
 */
export function retryDelay(attempt: number, error: unknown, options: RetryOptions, random: () => number): number | undefined {
  const hint = retryAfterOf(error);
  if (hint !== undefined) return hint > options.maxRetryAfterMs ? undefined : Math.ceil(hint);
  const ceiling = Math.min(options.maxDelayMs, options.baseDelayMs * 2 ** (attempt - 1));
  return Math.round(ceiling / 2 + random() * (ceiling / 2));
}

/** Waits `ms`; rejects with the signal's reason when it aborts first. */
export function sleep(ms: number, { signal }: { signal: AbortSignal }): Promise<void> {
  return new Promise((resolve, reject) => {
    if (signal.aborted) {
      reject(signalReason(signal));
      return;
    }
    const onAbort = () => {
      clearTimeout(timer);
      reject(signalReason(signal));
    };
    const timer = setTimeout(() => {
      signal.removeEventListener('abort', onAbort);
      resolve();
    }, ms);
    signal.addEventListener('abort', onAbort, { once: true });
  });
}

/** Options of {@link withResilience}; everything that varies is injectable for tests. */
export interface ResilienceOptions {
  readonly retry?: Partial<RetryOptions>;
  /** Settings of the adapter's own breaker, or `false` for none. */
  readonly circuitBreaker?: Partial<CircuitBreakerOptions> | false;
  /** A breaker to use instead of a new one, e.g. to share it or to look at it. */
  readonly breaker?: CircuitBreaker;
  readonly logger?: Logger;
  readonly now?: () => number;
  readonly random?: () => number;
  readonly sleep?: (ms: number, options: { signal: AbortSignal }) => Promise<void>;
}

/**
 * Wraps an adapter with retries and a circuit breaker. A retryable failure (429 honouring
 * `retry-after`, 5xx, 529 overloaded, connection resets and timeouts, broken streams) is retried with
 * backoff, but only while nothing but `retry` chunks has been yielded; each retry is announced by a
 * `retry` chunk (`attempt` is the attempt about to start) before the wait, and the wait ends when the
 * signal aborts. Retryable failures count against the breaker, completed calls for it; non-retryable
 * failures (400, 401, …) and aborts leave it as it is.
 *
 * @example
 * const adapter = withResilience(createOpenAIAdapter({ apiKey }), { retry: { maxAttempts: 3 }, logger });
 */
export function withResilience(adapter: ProviderAdapter, options: ResilienceOptions = {}): ProviderAdapter {
  const retry = { ...DEFAULT_RETRY, ...definedOnly(options.retry ?? {}) };
  const random = options.random ?? Math.random;
  const wait = options.sleep ?? sleep;
  const breaker =
    options.breaker ??
    (options.circuitBreaker === false
      ? undefined
      : createCircuitBreaker({
          name: adapter.name,
          ...(options.now ? { now: options.now } : {}),
          ...(options.logger ? { logger: options.logger } : {}),
          ...(options.circuitBreaker ?? {}),
        }));

  return {
    name: adapter.name,
    ...(breaker ? { circuit: () => breaker.state() } : {}),
    async *generate(request, { signal }) {
      for (let attempt = 1; ; attempt += 1) {
        signal.throwIfAborted();
        breaker?.assertCallable();
        let yieldedContent = false;
        try {
          for await (const chunk of adapter.generate(request, { signal })) {
            if (isContentChunk(chunk)) yieldedContent = true;
            yield chunk;
          }
          breaker?.recordSuccess();
          return;
        } catch (error) {
          if (signal.aborted) throw error;
          if (!isRetryable(error)) throw error;
          breaker?.recordFailure();
          if (yieldedContent || attempt >= retry.maxAttempts) throw error;
          // A circuit opened by this failure ends the call with the failure itself, which says more.
          if (breaker?.state() === CircuitState.open) throw error;
          const delayMs = retryDelay(attempt, error, retry, random);
          if (delayMs === undefined) throw error;
          options.logger?.info({ provider: adapter.name, requestId: request.requestId, attempt: attempt + 1, delayMs, err: error }, 'retrying provider call');
          yield { type: 'retry', attempt: attempt + 1, maxAttempts: retry.maxAttempts, delayMs, error: toErrorData(error) };
          await wait(delayMs, { signal });
        }
      }
    },
  };
}

/** The fields of a partial options object that are set, so `undefined` never overrides a default. */
function definedOnly<T extends object>(value: T): Partial<T> {
  return Object.fromEntries(Object.entries(value).filter(([, entry]) => entry !== undefined)) as Partial<T>;
}
