import { describe, expect, it } from 'vitest';
import { ProviderError } from '../../src/errors.ts';
import type { ChunkBody } from '../../src/protocol/index.ts';
import type { AdapterRequest, ProviderAdapter } from '../../services/provider/adapter.ts';
import { RetryAfterProviderError, parseRetryAfter } from '../../services/provider/provider-errors.ts';
import { CircuitState, createCircuitBreaker, retryDelay, sleep, withResilience, DEFAULT_RETRY } from '../../services/provider/resilience.ts';

const request: AdapterRequest = { requestId: 'r1', model: 'm', messages: [{ role: 'user', content: 'hi' }], tools: [] };
const ok: ChunkBody[] = [
  { type: 'text-delta', text: 'ok' },
  { type: 'usage', usage: { inputTokens: 1, outputTokens: 1 } },
  { type: 'done', finishReason: 'stop' },
];
const serverError = () => new ProviderError('provider_error', 'boom', { status: 500, retryable: true, provider: 'fake' });
const badRequest = () => new ProviderError('bad_request', 'no', { status: 400, retryable: false, provider: 'fake' });

type Step = ProviderError | 'ok' | { partial: string; then: ProviderError };

/** An adapter that plays one step per call and counts calls. */
function scripted(steps: Step[]): ProviderAdapter & { calls: number } {
  const adapter = {
    name: 'fake',
    calls: 0,
    async *generate() {
      const step = steps[Math.min(adapter.calls, steps.length - 1)]!;
      adapter.calls += 1;
      if (step === 'ok') {
        yield* ok;
        return;
      }
      if (step instanceof ProviderError) throw step;
      yield { type: 'text-delta', text: step.partial } as ChunkBody;
      throw step.then;
    },
  };
  return adapter;
}

async function run(adapter: ProviderAdapter, signal = new AbortController().signal): Promise<{ chunks: ChunkBody[]; error?: unknown }> {
  const chunks: ChunkBody[] = [];
  try {
    for await (const chunk of adapter.generate(request, { signal })) chunks.push(chunk);
    return { chunks };
  } catch (error) {
    return { chunks, error };
  }
}

function fakeClock(start = 1_000_000) {
  let now = start;
  return { now: () => now, advance: (ms: number) => void (now += ms) };
}

describe('retries', () => {
  it('retries retryable failures with exponential backoff and jitter, announcing each retry before it waits', async () => {
    const inner = scripted([serverError(), serverError(), 'ok']);
    const waits: number[] = [];
    const events: string[] = [];
    const adapter = withResilience(inner, {
      random: () => 1,
      sleep: async (ms) => {
        events.push(`sleep ${ms}`);
        waits.push(ms);
      },
      circuitBreaker: false,
    });
    const chunks: ChunkBody[] = [];
    for await (const chunk of adapter.generate(request, { signal: new AbortController().signal })) {
      events.push(chunk.type);
      chunks.push(chunk);
    }
    expect(waits).toEqual([500, 1000]);
    expect(events).toEqual(['retry', 'sleep 500', 'retry', 'sleep 1000', 'text-delta', 'usage', 'done']);
    expect(chunks[0]).toEqual({
      type: 'retry',
      attempt: 2,
      maxAttempts: 4,
      delayMs: 500,
      error: { code: 'provider_error', message: 'boom', retryable: true },
    });
    expect(inner.calls).toBe(3);
  });

  it('computes delays within [d/2, d] and caps them', () => {
    const options = { ...DEFAULT_RETRY, baseDelayMs: 100, maxDelayMs: 300 };
    expect(retryDelay(1, serverError(), options, () => 0)).toBe(50);
    expect(retryDelay(2, serverError(), options, () => 1)).toBe(200);
    expect(retryDelay(5, serverError(), options, () => 1)).toBe(300);
  });

  it('waits what retry-after says, and gives up at once when that is too long', async () => {
    const hinted = (ms: number) => new RetryAfterProviderError('rate_limited', 'slow down', { retryAfterMs: ms, status: 429, retryable: true });
    const waits: number[] = [];
    const adapter = withResilience(scripted([hinted(1500), 'ok']), { sleep: async (ms) => void waits.push(ms), circuitBreaker: false });
    expect((await run(adapter)).error).toBeUndefined();
    expect(waits).toEqual([1500]);

    const tooLong = withResilience(scripted([hinted(120_000), 'ok']), { sleep: async (ms) => void waits.push(ms), circuitBreaker: false });
    const result = await run(tooLong);
    expect(result.error).toMatchObject({ code: 'rate_limited' });
    expect(result.chunks).toEqual([]);
  });

  it('reads retry-after in seconds, as a date, and retry-after-ms', () => {
    expect(parseRetryAfter(new Headers({ 'retry-after': '3' }), 0)).toBe(3000);
    expect(parseRetryAfter(new Headers({ 'retry-after-ms': '250', 'retry-after': '3' }), 0)).toBe(250);
    const now = Date.parse('2026-01-01T00:00:00Z');
    expect(parseRetryAfter(new Headers({ 'retry-after': 'Thu, 01 Jan 2026 00:00:10 GMT' }), now)).toBe(10_000);
    expect(parseRetryAfter(new Headers({}), 0)).toBeUndefined();
  });

  it('does not retry a failure that is not retryable', async () => {
    const inner = scripted([badRequest(), 'ok']);
    const result = await run(withResilience(inner, { sleep: async () => {} }));
    expect(result.error).toMatchObject({ code: 'bad_request' });
    expect(inner.calls).toBe(1);
  });

  it('does not retry once content has been yielded', async () => {
    const inner = scripted([{ partial: 'Hel', then: serverError() }, 'ok']);
    const result = await run(withResilience(inner, { sleep: async () => {} }));
    expect(result.chunks).toEqual([{ type: 'text-delta', text: 'Hel' }]);
    expect(result.error).toMatchObject({ code: 'provider_error' });
    expect(inner.calls).toBe(1);
  });

  it('gives up after maxAttempts with the last failure', async () => {
    const inner = scripted([serverError()]);
    const result = await run(withResilience(inner, { retry: { maxAttempts: 3 }, sleep: async () => {}, circuitBreaker: false }));
    expect(result.chunks.map((chunk) => chunk.type)).toEqual(['retry', 'retry']);
    expect(result.error).toBeInstanceOf(ProviderError);
    expect(inner.calls).toBe(3);
  });

  it('stops waiting when the signal aborts during the backoff, with the signal reason', async () => {
    const controller = new AbortController();
    const reason = new Error('cancel');
    const inner = scripted([serverError(), 'ok']);
    const adapter = withResilience(inner, { random: () => 1, retry: { baseDelayMs: 60_000 }, circuitBreaker: false });
    const started = Date.now();
    setTimeout(() => controller.abort(reason), 20);
    const result = await run(adapter, controller.signal);
    expect(result.error).toBe(reason);
    expect(Date.now() - started).toBeLessThan(5_000);
    expect(inner.calls).toBe(1);
  });

  it('sleep rejects at once on an already-aborted signal', async () => {
    const controller = new AbortController();
    controller.abort(new Error('already'));
    await expect(sleep(10_000, { signal: controller.signal })).rejects.toThrow('already');
  });
});

describe('circuit breaker', () => {
  it('opens after 5 consecutive failures and then fails fast with circuit_open', async () => {
    const clock = fakeClock();
    const inner = scripted([serverError()]);
    const breaker = createCircuitBreaker({ name: 'fake', now: clock.now });
    const adapter = withResilience(inner, { breaker, retry: { maxAttempts: 1 } });
    for (let index = 0; index < 5; index += 1) expect((await run(adapter)).error).toMatchObject({ code: 'provider_error' });
    expect(breaker.state()).toBe(CircuitState.open);
    const result = await run(adapter);
    expect(result.error).toBeInstanceOf(ProviderError);
    expect(result.error).toMatchObject({ code: 'circuit_open', retryable: false });
    expect(inner.calls).toBe(5);
  });

  it('half-opens after 30 s, closes after 3 successes', async () => {
    const clock = fakeClock();
    const steps: Step[] = [serverError(), serverError(), serverError(), serverError(), serverError(), 'ok', 'ok', 'ok', 'ok'];
    const inner = scripted(steps);
    const breaker = createCircuitBreaker({ name: 'fake', now: clock.now });
    const adapter = withResilience(inner, { breaker, retry: { maxAttempts: 1 } });
    for (let index = 0; index < 5; index += 1) await run(adapter);
    clock.advance(29_999);
    expect((await run(adapter)).error).toMatchObject({ code: 'circuit_open' });
    clock.advance(1);
    expect(breaker.state()).toBe(CircuitState.halfOpen);
    for (let index = 0; index < 2; index += 1) expect((await run(adapter)).error).toBeUndefined();
    expect(breaker.state()).toBe(CircuitState.halfOpen);
    expect((await run(adapter)).error).toBeUndefined();
    expect(breaker.state()).toBe(CircuitState.closed);
  });

  it('opens again on a failure while half-open', async () => {
    const clock = fakeClock();
    const breaker = createCircuitBreaker({ name: 'fake', now: clock.now, failureThreshold: 2, resetTimeoutMs: 1000 });
    breaker.recordFailure();
    breaker.recordFailure();
    expect(breaker.state()).toBe(CircuitState.open);
    clock.advance(1000);
    expect(breaker.state()).toBe(CircuitState.halfOpen);
    breaker.recordSuccess();
    breaker.recordFailure();
    expect(breaker.state()).toBe(CircuitState.open);
    expect(() => breaker.assertCallable()).toThrow(/circuit open/);
  });

  it('is not moved by failures that are not the provider’s fault, and a success resets the count', async () => {
    const clock = fakeClock();
    const breaker = createCircuitBreaker({ name: 'fake', now: clock.now });
    const adapter = withResilience(scripted([badRequest()]), { breaker, retry: { maxAttempts: 1 } });
    for (let index = 0; index < 10; index += 1) await run(adapter);
    expect(breaker.state()).toBe(CircuitState.closed);
    for (let index = 0; index < 4; index += 1) breaker.recordFailure();
    breaker.recordSuccess();
    for (let index = 0; index < 4; index += 1) breaker.recordFailure();
    expect(breaker.state()).toBe(CircuitState.closed);
  });

  it('ends a call whose failure opened the circuit with that failure instead of retrying', async () => {
    const clock = fakeClock();
    const inner = scripted([serverError()]);
    const breaker = createCircuitBreaker({ name: 'fake', now: clock.now, failureThreshold: 2 });
    const result = await run(withResilience(inner, { breaker, sleep: async () => {} }));
    expect(result.chunks.map((chunk) => chunk.type)).toEqual(['retry']);
    expect(result.error).toMatchObject({ code: 'provider_error' });
    expect(inner.calls).toBe(2);
  });
});
