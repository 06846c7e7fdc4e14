import type { NatsConnection } from '@nats-io/nats-core';
import { createInbox } from '@nats-io/nats-core';
import type { ServiceProcess } from '../../test/helpers/service-process.ts';
import { spawn } from 'node:child_process';
import { readFileSync, readdirSync } from 'node:fs';
import { cpuTimeMs } from './cpu.ts';
import { closedLoop } from './load.ts';
import type { Summary } from './stats.ts';
import { measureInFlight } from './in-flight.ts';
import type { InFlightRow } from './in-flight.ts';

export type { InFlightRow } from './in-flight.ts';

/** One row of the scale-out: a count of runtime nodes under one ingress mode. */
export interface ScaleOutRow {
  readonly nodes: number;
  /** `broadcast` (every node hears every session message) or `queue` (partitioned: one node hears it, passes it on). */
  readonly ingress: string;
  readonly sessionsPerSecond: number;
  readonly latencyMs: Summary;
  readonly ratioToLinear: number;
  /** CPU ms of all runtime nodes together per session of the workload. */
  readonly runtimeCpuPerSessionMs: number | undefined;
  /** That CPU against the same mode's 1 node. */
  readonly cpuRatioToOne: number | undefined;
  /**
   * Session messages the fleet handled (heard from the bus, or was passed on by another node) per session message
   * published, in the workload (each session's prompt opens a session nobody holds); undefined when the nodes do
   * not report it (an older runtime).
   */
  readonly handledPerMessage: number | undefined;
  /** The same for prompts to sessions the fleet holds already (a second turn of sessions of the workload). */
  readonly heldHandledPerMessage: number | undefined;
  /**
   * Lease claims that asked the bucket (a KV write or read) per new session of the workload, all nodes together:
   * 1 when one node claims each new session, up to the node count when every node that heard it raced.
   */
  readonly leaseClaimsPerNewSession?: number | undefined;
  /**
   * CPU ms of the provider and the tool worker per session, in the same stretch: a control. They do the same work
   * per session whatever the count of runtime nodes, so their growth against the 1-node row is what the machine
   * itself (other processes on its cores, smaller batches per wakeup) adds; the runtime's growth past it is the
   * fleet's.
   */
  readonly controlCpuPerSessionMs?: number | undefined;
  /** That control against the same mode's 1 node. */
  readonly controlCpuRatioToOne?: number | undefined;
  /**
   * Messages the runtime nodes' connections received and sent, all nodes together, per session of the workload
   * (the server's `/connz` counts): every message a node hears, sends, or is answered with, lease, heartbeat and
   * log traffic included. Flat with the node count is what a fleet that scales looks like; unlike CPU time, a count
   * is not moved by other processes on the machine.
   */
  readonly runtimeMessagesPerSession?: number | undefined;
  /**
   * Where the runtime nodes' CPU went, all nodes together, per session of the workload (Linux `/proc` counts, summed
   * over every thread of each node): user and system CPU ms, context switches (voluntary: the thread waited, e.g. an
   * idle event loop; involuntary: the kernel took the core away), and read and write system calls (socket reads and
   * writes: fewer messages per call costs more calls per session). Undefined off Linux.
   */
  readonly runtimeDetail?: ProcessCounters | undefined;
  /** CPU ms per second of one runtime node with no load (heartbeats, sweeps, maintenance), mean over the row's nodes. */
  readonly idleCpuMsPerNodeSecond?: number | undefined;
}

/** Counts of a process from `/proc` (see {@link ScaleOutRow.runtimeDetail}). */
export interface ProcessCounters {
  readonly userMs: number;
  readonly systemMs: number;
  /** User + system CPU ms of the main thread (the event loop) alone; the rest is V8's and libuv's helper threads. */
  readonly mainThreadMs: number;
  readonly voluntarySwitches: number;
  readonly involuntarySwitches: number;
  readonly readCalls: number;
  readonly writeCalls: number;
}

const COUNTER_KEYS = ['userMs', 'systemMs', 'mainThreadMs', 'voluntarySwitches', 'involuntarySwitches', 'readCalls', 'writeCalls'] as const;

/** The {@link ProcessCounters} of `pid` so far, every thread together; undefined when `/proc` does not say. */
function processCounters(pid: number | undefined): ProcessCounters | undefined {
  if (pid === undefined) return undefined;
  try {
    const stat = readFileSync(`/proc/${pid}/stat`, 'utf8');
    const fields = stat.slice(stat.lastIndexOf(')') + 2).split(' ');
    let voluntarySwitches = 0;
    let involuntarySwitches = 0;
    for (const task of readdirSync(`/proc/${pid}/task`)) {
      let status: string;
      try {
        status = readFileSync(`/proc/${pid}/task/${task}/status`, 'utf8');
      } catch {
        continue; // a thread that ended since the listing
      }
      voluntarySwitches += Number(/^voluntary_ctxt_switches:\s+(\d+)/m.exec(status)?.[1] ?? 0);
      involuntarySwitches += Number(/^nonvoluntary_ctxt_switches:\s+(\d+)/m.exec(status)?.[1] ?? 0);
    }
    const io = readFileSync(`/proc/${pid}/io`, 'utf8');
    const main = readFileSync(`/proc/${pid}/task/${pid}/stat`, 'utf8');
    const mainFields = main.slice(main.lastIndexOf(')') + 2).split(' ');
    return {
      mainThreadMs: (Number(mainFields[11]) + Number(mainFields[12])) * 10,
      userMs: Number(fields[11]) * 10,
      systemMs: Number(fields[12]) * 10,
      voluntarySwitches,
      involuntarySwitches,
      readCalls: Number(/^syscr:\s+(\d+)/m.exec(io)?.[1] ?? NaN),
      writeCalls: Number(/^syscw:\s+(\d+)/m.exec(io)?.[1] ?? NaN),
    };
  } catch {
    return undefined;
  }
}

/** {@link processCounters} of every process in `pids` added up. */
function countersOf(pids: ReadonlyArray<number | undefined>): ProcessCounters | undefined {
  const total: Record<(typeof COUNTER_KEYS)[number], number> = { userMs: 0, systemMs: 0, mainThreadMs: 0, voluntarySwitches: 0, involuntarySwitches: 0, readCalls: 0, writeCalls: 0 };
  for (const pid of pids) {
    const counters = processCounters(pid);
    if (!counters) return undefined;
    for (const key of COUNTER_KEYS) total[key] += counters[key];
  }
  return total;
}

/** `(after - before) / per` for each counter; undefined when either is. */
function countersPer(after: ProcessCounters | undefined, before: ProcessCounters | undefined, per: number): ProcessCounters | undefined {
  if (!after || !before || per === 0) return undefined;
  const result: Record<(typeof COUNTER_KEYS)[number], number> = { userMs: 0, systemMs: 0, mainThreadMs: 0, voluntarySwitches: 0, involuntarySwitches: 0, readCalls: 0, writeCalls: 0 };
  for (const key of COUNTER_KEYS) result[key] = (after[key] - before[key]) / per;
  return result;
}

/** Sessions/s with more runtime nodes on one server, and many sessions in flight behind a slow model. */
export interface ScaleOutFigure {
  /** The same closed loop at 200 concurrent against 1, 3 and 4 runtime nodes, under each ingress mode. */
  readonly nodes: readonly ScaleOutRow[];
  /**
   * Sessions in flight at once on one node, each one model call of `providerLatencyMs` (latency-bound, as real
   * LLMs are): one row per count of `inFlightSessions`.
   */
  readonly inFlight: readonly InFlightRow[];
}

/** What {@link measureScaleOut} runs on: a way to start processes, and a session function per tag. */
export interface ScaleOutDeps {
  /** The bench's connection: the nodes' ingress counts are read with `$SRV.STATS`. */
  readonly nc: NatsConnection;
  /** The server's monitoring endpoint, for the runtime connections' message counts; absent: not counted. */
  readonly monitorUrl?: string;
  /** Ingress modes to measure (`AGENTBUS_INGRESS`); default both. */
  readonly ingressModes?: readonly string[];
  /** Runtime node counts; default 1, 3 and 4. */
  readonly nodeCounts?: readonly number[];
  readonly start: (entry: string, env?: Record<string, string>) => ServiceProcess;
  /** One session of the bench's workload (or of `text`) against whatever runtime nodes run now. */
  readonly session: (sessionId: string, options?: { text?: string; timeoutMs?: number }) => Promise<void>;
  readonly scriptPath: string;
  readonly slowScriptPath: string;
  readonly durationMs: number;
  /** Counts of sessions in flight at once behind the slow model, one row each (e.g. 200 and 2,000). */
  readonly inFlightSessions: readonly number[];
  readonly providerLatencyMs: number;
  /** Warm-up per runtime node of a row before it is measured (default 9 s: a row of N nodes warms for N × this). */
  readonly warmMsPerNode?: number;
  /** Sessions in flight at once in the measured stretch (default 200). */
  readonly concurrency?: number;
  /** After the warm-up, the nodes' CPU with no load is measured for this long (default 3 s; 0: not measured). */
  readonly idleMs?: number;
  readonly log: (text: string) => void;
}

// The admission limits are not what is measured here: 2,000 sessions start within a second.
const UNLIMITED = { AGENTBUS_TENANT_RATE: '0', AGENTBUS_SESSION_RATE: '0' };

/**
 * Session messages the runtime nodes handled so far (heard + passed on to them), and the lease claims they made
 * through the bucket; each undefined when a node does not say (an older runtime).
 */
async function ingressSoFar(nc: NatsConnection, nodes: number): Promise<{ handled: number | undefined; claims: number | undefined }> {
  const inbox = createInbox();
  const subscription = nc.subscribe(inbox);
  nc.publish('$SRV.STATS.agentbus-runtime', undefined, { reply: inbox });
  const timer = setTimeout(() => subscription.unsubscribe(), 5_000);
  const counts: Array<number | undefined> = [];
  const claims: Array<number | undefined> = [];
  const seen = new Set<string>();
  for await (const message of subscription) {
    const data = (JSON.parse(new TextDecoder().decode(message.data)) as { data?: { node?: string; ingress?: { heard: number; forwardedIn: number; claimsAsked?: number } } }).data;
    if (!data?.node || seen.has(data.node)) continue;
    seen.add(data.node);
    counts.push(data.ingress ? data.ingress.heard + data.ingress.forwardedIn : undefined);
    claims.push(data.ingress?.claimsAsked);
    if (seen.size >= nodes) break;
  }
  clearTimeout(timer);
  subscription.unsubscribe();
  const total = (values: Array<number | undefined>) => (seen.size < nodes || values.some((value) => value === undefined) ? undefined : values.reduce<number>((sum, value) => sum + (value ?? 0), 0));
  return { handled: total(counts), claims: total(claims) };
}

/** Messages in and out of every runtime connection (named `agentbus-runtime`) so far, from the server's `/connz`. */
async function runtimeMessages(monitorUrl: string | undefined): Promise<number | undefined> {
  if (!monitorUrl) return undefined;
  try {
    const response = await fetch(`${monitorUrl}/connz?limit=4096`);
    const connz = (await response.json()) as { connections?: Array<{ name?: string; in_msgs: number; out_msgs: number }> };
    return (connz.connections ?? []).filter((connection) => connection.name === 'agentbus-runtime').reduce((sum, connection) => sum + connection.in_msgs + connection.out_msgs, 0);
  } catch {
    return undefined;
  }
}

/** `after - before` per `per`, or undefined when either count is unknown. */
const perUnit = (after: number | undefined, before: number | undefined, per: number) => (after === undefined || before === undefined || per === 0 ? undefined : (after - before) / per);

function runtimeCpuMs(nodes: readonly ServiceProcess[]): number | undefined {
  let total = 0;
  for (const node of nodes) {
    const ms = cpuTimeMs(node.child.pid);
    if (ms === undefined) return undefined;
    total += ms;
  }
  return total;
}

/**
 * Starts its own provider (the workload script) and tool worker, then, for each ingress mode, 1, 3 and 4 runtime
 * nodes in turn, each count under the same closed loop (runtime CPU per session, and session messages handled
 * per message published; then a second prompt to 100 of the sessions, held by then); then one node behind a
 * provider whose every call takes `providerLatencyMs`, with `inFlightSessions` sessions at once. Stops everything
 * it started.
 */
export async function measureScaleOut(deps: ScaleOutDeps): Promise<ScaleOutFigure> {
  const provider = deps.start('services/provider/main.ts', { AGENTBUS_SCRIPT: deps.scriptPath });
  const tools = deps.start('bench/lib/tool-worker-main.ts');
  await Promise.all([provider.waitFor('provider service started'), tools.waitFor('bench tool worker ready')]);
  const running: ServiceProcess[] = [];
  const nodes: ScaleOutRow[] = [];
  let run = 0;
  try {
    for (const ingress of deps.ingressModes ?? ['broadcast', 'queue']) {
      const env = { ...UNLIMITED, AGENTBUS_INGRESS: ingress };
      const first = nodes.length;
      for (const count of deps.nodeCounts ?? [1, 3, 4]) {
        while (running.length < count) running.push(deps.start('services/runtime/main.ts', env));
        await Promise.all(running.map((node) => node.waitFor('runtime started')));
        const tag = `so${run++}x`;
        // Every node of the row as warm as the 1-node row's node (its JIT past the cold start) before the figure: a
        // fresh node spends its first seconds compiling (a quarter to a third of its CPU, profiled), and each node of
        // N hears 1/N of the warm-up, so the warm-up lasts N times as long. Without this, N fresh nodes pay the same
        // compiling N times inside the measured stretch, which reads as a per-session cost growing with N.
        // The first row also warms the provider and the tool worker, started fresh above: measured after the same
        // 3 s, their CPU per session read about twice the later rows' (the control column), and the row with them.
        // 3 s per node was not enough: `perf record` of the measured stretch (SCALE_OUT_PERF) found a node of 3 still
        // spending 9.6–9.7% of its CPU in V8's compilers and 12% in inline-cache misses and runtime lookups, against
        // 5.6–6.2% and 10% for the 1-node row's node; after 15 s per node, 2.0% compiling in both.
        const stackWarmUp = nodes.length === 0 ? 3 : 1;
        await closedLoop((index) => deps.session(`${tag}w${index}`), { concurrency: 50, durationMs: (deps.warmMsPerNode ?? 9_000) * count * stackWarmUp });
        // Each node's fixed cost (heartbeats and the watch of them, sweeps, maintenance), with no session traffic.
        const idleMs = deps.idleMs ?? 3_000;
        let idleCpuMsPerNodeSecond: number | undefined;
        if (idleMs > 0) {
          const idleBefore = runtimeCpuMs(running);
          const idleStart = performance.now();
          await new Promise((resolve) => setTimeout(resolve, idleMs));
          const idleAfter = runtimeCpuMs(running);
          const idleSeconds = (performance.now() - idleStart) / 1000;
          idleCpuMsPerNodeSecond = idleBefore === undefined || idleAfter === undefined ? undefined : (idleAfter - idleBefore) / idleSeconds / count;
        }
        const countersBefore = countersOf(running.map((node) => node.child.pid));
        const before = await ingressSoFar(deps.nc, count);
        const cpuBefore = runtimeCpuMs(running);
        const controlBefore = runtimeCpuMs([provider, tools]);
        const messagesBefore = await runtimeMessages(deps.monitorUrl);
        // SCALE_OUT_PERF=DIR: `perf record` (CPU clock, every thread) of the row's nodes over the measured stretch.
        const perf = process.env.SCALE_OUT_PERF
          ? spawn('perf', ['record', '-e', 'cpu-clock', '-F', '1999', '-o', `${process.env.SCALE_OUT_PERF}/${ingress}-${count}.data`, '-p', running.map((node) => node.child.pid).join(',')], { stdio: 'ignore' })
          : undefined;
        const load = await closedLoop((index) => deps.session(`${tag}${index}`), { concurrency: deps.concurrency ?? 200, durationMs: deps.durationMs });
        if (perf) {
          perf.kill('SIGINT');
          await new Promise((resolve) => perf.once('exit', resolve));
        }
        const cpuAfter = runtimeCpuMs(running);
        const countersAfter = countersOf(running.map((node) => node.child.pid));
        const controlAfter = runtimeCpuMs([provider, tools]);
        const messagesAfter = await runtimeMessages(deps.monitorUrl);
        const after = await ingressSoFar(deps.nc, count);
        // One prompt per session (its reply is the only answer a session's message gets); failed ones were published too.
        const published = load.sessions + load.failures;
        const handledPerMessage = perUnit(after.handled, before.handled, published);
        const leaseClaimsPerNewSession = perUnit(after.claims, before.claims, published);
        // A second turn of 100 sessions of the load: prompts to sessions a node holds.
        const held = Math.min(100, load.sessions);
        const heldBefore = await ingressSoFar(deps.nc, count);
        await closedLoop((index) => deps.session(`${tag}${index}`), { concurrency: 20, durationMs: 60_000, maxSessions: held });
        const heldAfter = await ingressSoFar(deps.nc, count);
        const heldHandledPerMessage = perUnit(heldAfter.handled, heldBefore.handled, held);
        const runtimeCpuPerSessionMs = cpuBefore === undefined || cpuAfter === undefined || load.sessions === 0 ? undefined : (cpuAfter - cpuBefore) / load.sessions;
        const controlCpuPerSessionMs = controlBefore === undefined || controlAfter === undefined || load.sessions === 0 ? undefined : (controlAfter - controlBefore) / load.sessions;
        const one = nodes[first];
        const controlBase = one ? one.controlCpuPerSessionMs : controlCpuPerSessionMs;
        const base = one?.sessionsPerSecond ?? load.sessionsPerSecond;
        const cpuBase = one ? one.runtimeCpuPerSessionMs : runtimeCpuPerSessionMs;
        nodes.push({
          nodes: count,
          ingress,
          sessionsPerSecond: load.sessionsPerSecond,
          latencyMs: load.latencyMs,
          ratioToLinear: load.sessionsPerSecond / (base * count),
          runtimeCpuPerSessionMs,
          cpuRatioToOne: runtimeCpuPerSessionMs === undefined || cpuBase === undefined ? undefined : runtimeCpuPerSessionMs / cpuBase,
          handledPerMessage,
          heldHandledPerMessage,
          leaseClaimsPerNewSession,
          controlCpuPerSessionMs,
          runtimeMessagesPerSession: perUnit(messagesAfter, messagesBefore, load.sessions),
          controlCpuRatioToOne: controlCpuPerSessionMs === undefined || controlBase === undefined ? undefined : controlCpuPerSessionMs / controlBase,
          runtimeDetail: countersPer(countersAfter, countersBefore, load.sessions),
          idleCpuMsPerNodeSecond,
        });
        const detail = nodes[nodes.length - 1]!.runtimeDetail;
        const figure = (value: number | undefined, digits = 2) => (value === undefined ? 'n/a' : value.toFixed(digits));
        deps.log(
          `scale-out (${ingress}): ${count} runtime node(s): ${load.sessionsPerSecond.toFixed(0)} sessions/s at ${deps.concurrency ?? 200} concurrent (p50 ${load.latencyMs.p50.toFixed(1)} ms), runtime CPU ${figure(runtimeCpuPerSessionMs)} ms/session (provider + tools ${figure(controlCpuPerSessionMs)}), ` +
            `session messages handled per message published ${figure(handledPerMessage)} (new sessions), ${figure(heldHandledPerMessage)} (held sessions), lease claims asked per new session ${figure(leaseClaimsPerNewSession)}, runtime messages per session ${figure(perUnit(messagesAfter, messagesBefore, load.sessions), 1)}; ` +
            `per session user ${figure(detail?.userMs)} / system ${figure(detail?.systemMs)} ms (main thread ${figure(detail?.mainThreadMs)}), switches ${figure(detail?.voluntarySwitches)} voluntary / ${figure(detail?.involuntarySwitches)} involuntary, ` +
            `read calls ${figure(detail?.readCalls)}, write calls ${figure(detail?.writeCalls)}; idle CPU ${figure(idleCpuMsPerNodeSecond)} ms/s per node`,
        );
      }
      for (const node of running.splice(0)) await node.stop();
    }
  } finally {
    for (const node of running.splice(0)) await node.stop();
    await provider.stop();
    await tools.stop();
  }

  if (deps.inFlightSessions.length === 0) return { nodes, inFlight: [] };
  // Latency-bound: one model call of providerLatencyMs per session, hundreds to thousands in flight on one node.
  const slow = deps.start('services/provider/main.ts', { AGENTBUS_SCRIPT: deps.slowScriptPath });
  const node = deps.start('services/runtime/main.ts', UNLIMITED);
  try {
    await Promise.all([slow.waitFor('provider service started'), node.waitFor('runtime started')]);
    const inFlight: InFlightRow[] = await measureInFlight({
      runtimePid: node.child.pid,
      session: (sessionId) => deps.session(sessionId, { text: 'hi', timeoutMs: 60_000 }),
      counts: deps.inFlightSessions,
      providerLatencyMs: deps.providerLatencyMs,
      windowMs: Math.max(deps.durationMs, 4 * deps.providerLatencyMs),
      tag: `inflight${run++}x`,
      log: (text) => deps.log(`scale-out: ${text}`),
    });
    return { nodes, inFlight };
  } finally {
    await node.stop();
    await slow.stop();
  }
}
