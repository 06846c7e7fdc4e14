import { readFile } from 'node:fs/promises';
import type { ServiceProcess } from '../../test/helpers/service-process.ts';
import { closedLoop } from './load.ts';
import type { Summary } from './stats.ts';

/** Sessions/s with more runtime nodes on one server, and many sessions in flight behind a slow model. */
export interface ScaleOutFigure {
  /** The same closed loop at 200 concurrent against 1, 2 and 4 runtime nodes. */
  readonly nodes: ReadonlyArray<{ readonly nodes: number; readonly sessionsPerSecond: number; readonly latencyMs: Summary; readonly ratioToLinear: number }>;
  /** `sessions` sessions in flight at once, each one model call of `providerLatencyMs` (latency-bound, as real LLMs are). */
  readonly inFlight: {
    readonly sessions: number;
    readonly providerLatencyMs: number;
    readonly seconds: number;
    readonly sessionsPerSecond: number;
    /** Every session back-to-back with nothing but the model's latency: sessions / latency. */
    readonly idealPerSecond: number;
    readonly latencyMs: Summary;
    readonly failures: number;
    /** Resident memory of the runtime process at the end of the run. */
    readonly runtimeRssBytes: number | undefined;
  };
}

/** What {@link measureScaleOut} runs on: a way to start processes, and a session function per tag. */
export interface ScaleOutDeps {
  readonly start: (entry: string, env?: Record<string, string>) => ServiceProcess;
  /** One session of the bench's workload (or of `text`) against whatever runtime nodes run now. */
  readonly session: (sessionId: string, options?: { text?: string; timeoutMs?: number }) => Promise<void>;
  readonly scriptPath: string;
  readonly slowScriptPath: string;
  readonly durationMs: number;
  readonly inFlightSessions: number;
  readonly providerLatencyMs: number;
  readonly log: (text: string) => void;
}

// The admission limits are not what is measured here: 2,000 sessions start within a second.
const UNLIMITED = { AGENTBUS_TENANT_RATE: '0', AGENTBUS_SESSION_RATE: '0' };

async function rssOf(pid: number | undefined): Promise<number | undefined> {
  if (pid === undefined) return undefined;
  const status = await readFile(`/proc/${pid}/status`, 'utf8').catch(() => '');
  const kb = /VmRSS:\s+(\d+) kB/.exec(status)?.[1];
  return kb === undefined ? undefined : Number(kb) * 1024;
}

/**
 * Starts its own provider (the workload script) and tool worker, then 1, 2 and 4 runtime nodes in turn, each count under
 * the same closed loop; then one node behind a provider whose every call takes `providerLatencyMs`, with
 * `inFlightSessions` sessions at once. Stops everything it started.
 */
export async function measureScaleOut(deps: ScaleOutDeps): Promise<ScaleOutFigure> {
  const provider = deps.start('services/provider/main.ts', { AGENTBUS_SCRIPT: deps.scriptPath });
  const tools = deps.start('bench/lib/tool-worker-main.ts');
  await Promise.all([provider.waitFor('provider service started'), tools.waitFor('bench tool worker ready')]);
  const running: ServiceProcess[] = [];
  const nodes: Array<{ nodes: number; sessionsPerSecond: number; latencyMs: Summary; ratioToLinear: number }> = [];
  let run = 0;
  try {
    for (const count of [1, 2, 4]) {
      while (running.length < count) running.push(deps.start('services/runtime/main.ts', UNLIMITED));
      await Promise.all(running.map((node) => node.waitFor('runtime started')));
      const tag = `so${run++}x`;
      await closedLoop((index) => deps.session(`${tag}w${index}`), { concurrency: 50, durationMs: 500 });
      const load = await closedLoop((index) => deps.session(`${tag}${index}`), { concurrency: 200, durationMs: deps.durationMs });
      const base = nodes[0]?.sessionsPerSecond ?? load.sessionsPerSecond;
      nodes.push({ nodes: count, sessionsPerSecond: load.sessionsPerSecond, latencyMs: load.latencyMs, ratioToLinear: load.sessionsPerSecond / (base * count) });
      deps.log(`scale-out: ${count} runtime node(s): ${load.sessionsPerSecond.toFixed(0)} sessions/s at 200 concurrent (p50 ${load.latencyMs.p50.toFixed(1)} ms)`);
    }
  } finally {
    for (const node of running.splice(0)) await node.stop();
    await provider.stop();
    await tools.stop();
  }

  // Latency-bound: one model call of providerLatencyMs per session, thousands in flight on one node.
  const slow = deps.start('services/provider/main.ts', { AGENTBUS_SCRIPT: deps.slowScriptPath });
  const node = deps.start('services/runtime/main.ts', UNLIMITED);
  try {
    await Promise.all([slow.waitFor('provider service started'), node.waitFor('runtime started')]);
    const tag = `inflight${run++}x`;
    const durationMs = Math.max(deps.durationMs, 4 * deps.providerLatencyMs);
    const load = await closedLoop((index) => deps.session(`${tag}${index}`, { text: 'hi', timeoutMs: 60_000 }), { concurrency: deps.inFlightSessions, durationMs });
    const runtimeRssBytes = await rssOf(node.child.pid);
    const idealPerSecond = deps.inFlightSessions / (deps.providerLatencyMs / 1000);
    deps.log(`scale-out: ${deps.inFlightSessions} sessions in flight behind a ${deps.providerLatencyMs} ms model: ${load.sessionsPerSecond.toFixed(0)}/s of an ideal ${idealPerSecond.toFixed(0)}/s (p50 ${load.latencyMs.p50.toFixed(0)} ms), ${load.failures} failed, runtime RSS ${runtimeRssBytes === undefined ? 'n/a' : (runtimeRssBytes / 1024 / 1024).toFixed(0)} MB`);
    return {
      nodes,
      inFlight: {
        sessions: deps.inFlightSessions,
        providerLatencyMs: deps.providerLatencyMs,
        seconds: load.seconds,
        sessionsPerSecond: load.sessionsPerSecond,
        idealPerSecond,
        latencyMs: load.latencyMs,
        failures: load.failures,
        runtimeRssBytes,
      },
    };
  } finally {
    await node.stop();
    await slow.stop();
  }
}
