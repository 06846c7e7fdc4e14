import { readFileSync } from 'node:fs';
import { describe, expect, it } from 'vitest';
import { cpuTimeMs, measureCpu } from '../../bench/lib/cpu.ts';
import { closedLoop } from '../../bench/lib/load.ts';
import { renderMarkdown, targetsOf } from '../../bench/lib/report.ts';
import type { BenchResults } from '../../bench/lib/report.ts';
import { quantile, summarize } from '../../bench/lib/stats.ts';

// The bench's own logic: what it reports must follow from what it measured.
const saved = JSON.parse(readFileSync(new URL('../../bench/results/latest.json', import.meta.url), 'utf8')) as BenchResults;

/** The saved run with the agentbus row's sessions/s at 200 replaced. */
function withAgentbusRate(rate: number): BenchResults {
  return {
    ...saved,
    sessions: saved.sessions.map((row) => (row.key === 'agentbus' ? { ...row, c200: { ...row.c200, sessionsPerSecond: rate } } : row)),
  };
}

describe('bench statistics', () => {
  it('takes nearest-rank quantiles and summarizes a sample', () => {
    const values = Array.from({ length: 100 }, (_, i) => 100 - i);
    expect(quantile([...values].sort((a, b) => a - b), 0.5)).toBe(50);
    expect(summarize(values)).toMatchObject({ n: 100, p50: 50, p99: 99, min: 1, max: 100, mean: 50.5 });
    expect(summarize([]).p50).toBeNaN();
  });

  it('runs a closed loop at the asked concurrency and counts failures apart', async () => {
    let running = 0;
    let most = 0;
    const result = await closedLoop(
      async (index) => {
        running += 1;
        most = Math.max(most, running);
        await new Promise((resolve) => setTimeout(resolve, 2));
        running -= 1;
        if (index % 10 === 9) throw new Error('every tenth fails');
      },
      { concurrency: 4, durationMs: 10_000, maxSessions: 40 },
    );
    expect(most).toBe(4);
    expect(result.sessions + result.failures).toBe(40);
    expect(result.failures).toBe(4);
    expect(result.sessionsPerSecond).toBeGreaterThan(0);
  });
});

describe('bench CPU accounting', () => {
  it('reads a process CPU time and divides what it used by the sessions run', () => {
    if (process.platform !== 'linux') return;
    const before = cpuTimeMs(process.pid)!;
    expect(before).toBeGreaterThan(0);
    const meter = measureCpu({ self: process.pid }, 2);
    const until = Date.now() + 60;
    while (Date.now() < until) Math.sqrt(Math.random());
    const share = meter.stop(10)!;
    expect(share.perSessionMs.self).toBeGreaterThanOrEqual(0);
    expect(share.totalMs).toBe(share.perSessionMs.self);
    if (share.totalMs > 0) expect(share.ceilingPerSecond).toBeCloseTo(2000 / share.totalMs);
    expect(cpuTimeMs(undefined)).toBeUndefined();
    expect(measureCpu({ gone: 2 ** 30 }, 2).stop(10)).toBeUndefined();
  });
});

describe('bench goals', () => {
  it('checks each goal against its bound, from the figures measured', () => {
    const langgraph = saved.sessions.find((row) => row.key === 'langgraph')!.c200.sessionsPerSecond;
    const goal = (results: BenchResults, name: string) => targetsOf(results).find((check) => check.goal.includes(name))!;
    // Just over the bound: exactly 3× can come out a hair under 3 in floating point, whatever the saved rates.
    expect(goal(withAgentbusRate(langgraph * 3.001), 'LangGraph').met).toBe(true);
    expect(goal(withAgentbusRate(langgraph * 2.9), 'LangGraph').met).toBe(false);
    expect(goal(withAgentbusRate(langgraph * 3), 'LangGraph').value).toBeCloseTo(3);
    const heavy = { ...saved, heap: { ...saved.heap, bytesPerIdleSession: 4.5 * 1024 } };
    expect(goal(heavy, 'heap').met).toBe(false);
    const floor = saved.sequential.floorMs;
    const quick = { ...saved, sequential: { ...saved.sequential, latencyMs: { ...saved.sequential.latencyMs, p50: floor * 1.29 } } };
    expect(goal(quick, 'sequential').met).toBe(true);
  });

  it('writes every goal and the machine line into the markdown report', () => {
    const targets = targetsOf(saved);
    const markdown = renderMarkdown(saved, targets);
    expect(markdown).toContain(saved.machineLine);
    for (const check of targets) expect(markdown).toContain(`| ${check.goal} |`);
    expect(markdown).toContain('CPU per agentbus session at 200 concurrent');
  });

  it("reports a held session's first delta beside a new session's, when the run measured it", () => {
    const held = { ...saved.firstDelta.bus, p50: 1.5, p99: 3 };
    const withHeld = { ...saved, firstDelta: { ...saved.firstDelta, held } };
    const row = renderMarkdown(withHeld, targetsOf(withHeld))
      .split('\n')
      .find((line) => line.startsWith("| … a held session's next prompt"));
    expect(row).toContain('through the bus 1.50 / 3.00');
    expect(row).toContain(`${(1.5 / saved.firstDelta.provider.p50).toFixed(2)}×`);
    // A run saved before the figure existed renders as before.
    const { held: _none, ...older } = withHeld.firstDelta;
    expect(renderMarkdown({ ...saved, firstDelta: older }, targetsOf(saved))).not.toContain('a held session');
  });
});
