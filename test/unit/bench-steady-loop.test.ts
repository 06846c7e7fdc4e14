import { setTimeout as sleep } from 'node:timers/promises';
import { describe, expect, it } from 'vitest';
import { steadyLoop, windowRate } from '../../bench/lib/steady-loop.ts';
import type { SessionSpan } from '../../bench/lib/steady-loop.ts';

/** `workers` workers, each running sessions of `length` ms back to back from its own phase, over `[0, until]`. */
function spansOf(workers: number, length: number, until: number, phase: (worker: number) => number): SessionSpan[] {
  const spans: SessionSpan[] = [];
  for (let worker = 0; worker < workers; worker += 1) {
    for (let start = -phase(worker); start < until; start += length) spans.push({ worker, start, end: start + length, ok: true });
  }
  return spans;
}

describe('the in-flight figure: a closed loop measured in its steady state', () => {
  it('gives workers / latency whatever the phase of the sessions against the window', () => {
    // All in step (every session ends in the same millisecond), and spread: the window cuts them anywhere.
    for (const phase of [() => 0, () => 370, (worker: number) => (worker * 37) % 1120]) {
      const spans = spansOf(200, 1120, 20_000, phase);
      expect(windowRate(spans, 2_000, 10_000)).toBeCloseTo(200 / 1.12, 6);
      expect(windowRate(spans, 2_345, 9_876)).toBeCloseTo(200 / 1.12, 6);
    }
  });

  it('counts nothing for a failed session or for a worker idle between sessions', () => {
    const busy: SessionSpan[] = [{ worker: 0, start: 0, end: 1_000, ok: true }];
    expect(windowRate(busy, 0, 1_000)).toBe(1);
    expect(windowRate([...busy, { worker: 0, start: 1_000, end: 2_000, ok: false }], 0, 2_000)).toBe(0.5);
    expect(windowRate([...busy, { worker: 0, start: 1_500, end: 2_000, ok: true }], 0, 2_000)).toBe(1);
  });

  it('leaves the slow first round out of the rate and reports it apart', async () => {
    const workers = 20;
    const result = await steadyLoop(
      async (index) => {
        // Every worker's first session waits for a cold start; the rest take 100 ms.
        await sleep(index < workers ? 400 : 100);
      },
      { concurrency: workers, windowMs: 1_000, minRampMs: 0 },
    );
    expect(result.firstRoundMs.n).toBe(workers);
    expect(result.firstRoundMs.p50).toBeGreaterThanOrEqual(395);
    expect(result.rampMs).toBeGreaterThanOrEqual(395);
    // Ideal: 20 / 0.1 s. Timers run late on a loaded machine, never early.
    expect(result.sessionsPerSecond).toBeLessThanOrEqual(workers / 0.1 + 1e-9);
    expect(result.sessionsPerSecond).toBeGreaterThan(0.6 * (workers / 0.1));
    expect(result.latencyMs.max).toBeLessThan(400);
    expect(result.failures).toBe(0);
  });

  it('counts failed sessions, the ramp included, and fails when every session fails', async () => {
    let calls = 0;
    const result = await steadyLoop(
      async () => {
        calls += 1;
        await sleep(20);
        if (calls % 2 === 1) throw new Error('refused');
      },
      { concurrency: 2, windowMs: 200 },
    );
    expect(result.failures).toBeGreaterThan(0);
    expect(result.failures + result.spans.filter((span) => span.ok).length).toBe(result.spans.length);
    await expect(steadyLoop(async () => { await sleep(5); throw new Error('down'); }, { concurrency: 2, windowMs: 50 })).rejects.toThrow('down');
  });
});
