import { readFile } from 'node:fs/promises';
import { cpuTimeMs } from './cpu.ts';
import { steadyLoop } from './steady-loop.ts';
import type { Summary } from './stats.ts';

/** One count of sessions in flight behind a slow model, on one runtime node. */
export interface InFlightRow {
  readonly sessions: number;
  readonly providerLatencyMs: number;
  /** Length of the measured window (the steady state, after the ramp). */
  readonly seconds: number;
  /** Sessions per second in the window: each session counts for its part inside it (see `windowRate`). */
  readonly sessionsPerSecond: number;
  /** Every session back-to-back with nothing but the model's latency: sessions / latency. */
  readonly idealPerSecond: number;
  /** Latency of the sessions that overlap the window. */
  readonly latencyMs: Summary;
  /** Failed sessions of the whole run, the ramp's included. */
  readonly failures: number;
  /** From the start to the window: until every worker's first session had ended, and at least 5 model latencies. */
  readonly rampMs?: number;
  /** Latency of the first round: `sessions` new sessions sent in the same millisecond (absent in older results). */
  readonly firstRoundMs?: Summary;
  /** Resident memory of the runtime process at the end of the run. */
  readonly runtimeRssBytes: number | undefined;
  /** CPU ms of the runtime per session of this run (every session it ran, the ramp's included). */
  readonly runtimeCpuPerSessionMs: number | undefined;
}

/** What {@link measureInFlight} runs against: one runtime node already serving, behind a provider of `providerLatencyMs`. */
export interface InFlightDeps {
  /** The runtime node's pid, for its CPU time and resident memory; undefined: not measured. */
  readonly runtimePid: number | undefined;
  /** One session: a new session id, one prompt, resolved once its turn ended. */
  readonly session: (sessionId: string) => Promise<void>;
  /** Counts of sessions in flight at once, one row each (e.g. 200 and 2,000). */
  readonly counts: readonly number[];
  readonly providerLatencyMs: number;
  /** Length of each count's measured window. */
  readonly windowMs: number;
  /** A prefix for this run's session ids (unique on the bus). */
  readonly tag: string;
  readonly log: (text: string) => void;
}

async function rssOf(pid: number | undefined): Promise<number | undefined> {
  if (pid === undefined) return undefined;
  const status = await readFile(`/proc/${pid}/status`, 'utf8').catch(() => '');
  const kb = /VmRSS:\s+(\d+) kB/.exec(status)?.[1];
  return kb === undefined ? undefined : Number(kb) * 1024;
}

/**
 * Sessions in flight behind a model whose every call takes `providerLatencyMs`, each a closed-loop worker (new
 * session, one model call, answer, next), measured in the steady state: the ramp (every worker's first session, all
 * sent in the same millisecond, on a node that may be cold) is reported apart and left out of the rate, and the
 * window's sessions count for their part inside it, so no worker sits idle in the figure waiting for the slowest one.
 */
export async function measureInFlight(deps: InFlightDeps): Promise<InFlightRow[]> {
  const rows: InFlightRow[] = [];
  for (const [index, sessions] of deps.counts.entries()) {
    const cpuBefore = cpuTimeMs(deps.runtimePid);
    const load = await steadyLoop((session) => deps.session(`${deps.tag}${index}x${session}`), {
      concurrency: sessions,
      windowMs: deps.windowMs,
      minRampMs: 5 * deps.providerLatencyMs,
    });
    const cpuAfter = cpuTimeMs(deps.runtimePid);
    const runtimeRssBytes = await rssOf(deps.runtimePid);
    const idealPerSecond = sessions / (deps.providerLatencyMs / 1000);
    const ran = load.spans.length;
    const runtimeCpuPerSessionMs = cpuBefore === undefined || cpuAfter === undefined || ran === 0 ? undefined : (cpuAfter - cpuBefore) / ran;
    deps.log(
      `in flight: ${sessions} sessions behind a ${deps.providerLatencyMs} ms model: ${load.sessionsPerSecond.toFixed(0)}/s of an ideal ${idealPerSecond.toFixed(0)}/s over ${(deps.windowMs / 1000).toFixed(1)} s ` +
        `(p50 ${load.latencyMs.p50.toFixed(0)} ms) after a ramp of ${(load.rampMs / 1000).toFixed(1)} s (first round p50 ${load.firstRoundMs.p50.toFixed(0)} ms, max ${load.firstRoundMs.max.toFixed(0)}), ${load.failures} failed, ` +
        `runtime RSS ${runtimeRssBytes === undefined ? 'n/a' : (runtimeRssBytes / 1024 / 1024).toFixed(0)} MB, runtime CPU ${runtimeCpuPerSessionMs === undefined ? 'n/a' : runtimeCpuPerSessionMs.toFixed(2)} ms/session`,
    );
    rows.push({
      sessions,
      providerLatencyMs: deps.providerLatencyMs,
      seconds: load.seconds,
      sessionsPerSecond: load.sessionsPerSecond,
      idealPerSecond,
      latencyMs: load.latencyMs,
      failures: load.failures,
      rampMs: load.rampMs,
      firstRoundMs: load.firstRoundMs,
      runtimeRssBytes,
      runtimeCpuPerSessionMs,
    });
  }
  return rows;
}
