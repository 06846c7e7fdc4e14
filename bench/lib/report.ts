import type { ColdStartFigure } from './cold-start.ts';
import type { ContextPrepResult } from './context-prep.ts';
import type { ServiceLoopDelay } from './event-loop.ts';
import type { CpuShare } from './cpu.ts';
import type { DashboardFigure } from './dashboard-load.ts';
import type { MemoryFigure } from './memory-load.ts';
import type { RecallFigure } from './recall-load.ts';
import type { InFlightRow, ScaleOutFigure } from './scale-out.ts';
import type { LoadResult } from './load.ts';
import type { MachineInfo } from './machine.ts';
import type { RoundTrips } from './raw-bus.ts';
import type { Summary } from './stats.ts';

/** One system's sessions at concurrency 1 and 200. */
export interface PeerRow {
  readonly key: string;
  readonly name: string;
  readonly versions: readonly string[];
  readonly c1: LoadResult;
  readonly c200: LoadResult;
}

/** Everything one run measured. */
export interface BenchResults {
  readonly mode: 'quick' | 'full';
  readonly date: string;
  readonly machine: MachineInfo;
  readonly machineLine: string;
  readonly workload: { modelCalls: number; toolCalls: number; script: unknown };
  readonly sessions: readonly PeerRow[];
  readonly roundTrips: RoundTrips;
  readonly sequential: { latencyMs: Summary; logEventsPerSession: number; ops: { requests: number; jetStreamGets: number; appends: number }; floorMs: number };
  /** `bus`: a new session's first prompt (the goal's figure); `held`: the next prompt to a session its node holds (absent in older results). */
  readonly firstDelta: { bus: Summary; held?: Summary; provider: Summary };
  /** CPU per agentbus session at concurrency 200, by process (Linux only). */
  readonly cpuAt200?: CpuShare;
  /** Event-loop delay of each service that reports one on `$SRV.STATS`, right after the load at 200. */
  readonly loopDelays?: readonly ServiceLoopDelay[];
  /** The dashboard's own CPU while 100 sessions stream, and what its browser stream carried. */
  readonly dashboard?: DashboardFigure;
  /** Memory's indexing rate against the log's append rate, and its search latency by index size. */
  readonly memory?: MemoryFigure;
  /** How often a turn got recalled snippets under load, with an embedder as slow as a remote one. */
  readonly recall?: RecallFigure;
  /** Sessions/s with 1, 2 and 4 runtime nodes, and thousands of sessions in flight behind a slow model. */
  readonly scaleOut?: ScaleOutFigure;
  readonly scaling: ReadonlyArray<{ workers: number; callsPerSecond: number; linear: number; ratioToLinear: number; latencyMs: Summary }>;
  readonly scalingSetup: { toolDelayMs: number; slotsPerWorker: number; outstandingPerWorker: number };
  readonly heap: {
    sessions: number;
    hostedBefore: number;
    hostedHydrated: number;
    hostedPassivated: number;
    eventsPerSession: number;
    baselineBytes: number;
    hydratedBytes: number;
    passivatedBytes: number;
    bytesPerIdleSession: number;
    bytesPerSessionAfterPassivation: number;
    passivationMs: number;
  };
  readonly contextPrep: readonly ContextPrepResult[];
  /** Time to ready of `agentbus up` against a bare `node -e` start (absent in results of older runs). */
  readonly coldStart?: ColdStartFigure;
  readonly seconds: number;
}

/** A goal, the figure measured against it, and whether it was met. */
export interface TargetCheck {
  readonly goal: string;
  readonly measured: string;
  readonly value: number;
  readonly target: string;
  readonly met: boolean;
}

const fixed = (value: number, digits = 2) => (Number.isFinite(value) ? value.toFixed(digits) : 'n/a');
/** Milliseconds written as microseconds, one decimal. */
const micros = (ms: number) => fixed(ms * 1000, 1);

/** Checks the issue's goals (goals, not assertions). */
export function targetsOf(results: BenchResults): TargetCheck[] {
  const row = (key: string) => results.sessions.find((entry) => entry.key === key);
  const bus = row('agentbus')!.c200.sessionsPerSecond;
  const checks: TargetCheck[] = [];
  const ratio = (goal: string, value: number, atLeast: boolean, bound: number, measured: string) =>
    checks.push({ goal, value, measured, target: `${atLeast ? '≥' : '≤'} ${bound}×`, met: atLeast ? value >= bound : value <= bound });
  const langgraph = row('langgraph');
  if (langgraph) ratio('durable sessions/s at 200 vs LangGraph.js', bus / langgraph.c200.sessionsPerSecond, true, 3, `${fixed(bus, 0)} vs ${fixed(langgraph.c200.sessionsPerSecond, 0)}/s`);
  const vercel = row('vercel');
  if (vercel) ratio('durable sessions/s at 200 vs Vercel AI generateText', bus / vercel.c200.sessionsPerSecond, true, 1, `${fixed(bus, 0)} vs ${fixed(vercel.c200.sessionsPerSecond, 0)}/s`);
  const { toolCall, recordedToolCall, request } = results.roundTrips;
  ratio('tool round trip p50 vs raw request/reply p50', toolCall.p50 / request.p50, false, 2, `${fixed(toolCall.p50, 3)} vs ${fixed(request.p50, 3)} ms`);
  if (recordedToolCall) {
    ratio('side-effecting tool round trip p50, result ledger on, vs raw request/reply p50', recordedToolCall.p50 / request.p50, false, 2, `${fixed(recordedToolCall.p50, 3)} vs ${fixed(request.p50, 3)} ms`);
  }
  const { latencyMs, floorMs } = results.sequential;
  ratio('sequential session latency p50 vs its bus floor', latencyMs.p50 / floorMs, false, 1.3, `${fixed(latencyMs.p50)} vs ${fixed(floorMs)} ms`);
  const kb = results.heap.bytesPerIdleSession / 1024;
  checks.push({ goal: 'heap per hydrated idle session', value: kb, measured: `${fixed(kb)} KB`, target: '≤ 4 KB', met: kb <= 4 });
  const small = results.contextPrep[0]!;
  const large = results.contextPrep.at(-1)!;
  // Both ways of timing it: after a step (new messages logged, as each step of a turn sees it; a history at its
  // budget counts the new ones with tiktoken after the step's request, `laterMs`, when their bounds take at most
  // 1% of the budget, one that fits on byte bounds counts nothing) and repeated.
  const us = (ms: number) => `${micros(ms)} µs`;
  // Results saved before counts were taken after the request (`--render` of an older file) have no `laterMs`.
  const later = (large as Partial<ContextPrepResult>).laterMs;
  ratio(
    `context prep after a step, ${large.messages} vs ${small.messages} messages (p50)`,
    large.stepMs.p50 / small.stepMs.p50,
    false,
    1.5,
    `${us(large.stepMs.p50)} vs ${us(small.stepMs.p50)}${later ? ` (+ ${us(later.p50)} of counts after the request)` : ''}`,
  );
  ratio(`context prep repeated, ${large.messages} vs ${small.messages} messages (p50)`, large.warmMs.p50 / small.warmMs.p50, false, 1.5, `${us(large.warmMs.p50)} vs ${us(small.warmMs.p50)}`);
  // Issue #17's scale-out goals, per ingress mode, for 3 and 4 runtime nodes.
  for (const entry of (results.scaleOut?.nodes ?? []).filter((scale) => scale.nodes >= 3)) {
    const mode = entry.ingress ?? 'broadcast';
    if (entry.cpuRatioToOne !== undefined) {
      ratio(`runtime CPU per session, ${entry.nodes} nodes vs 1 (${mode} ingress)`, entry.cpuRatioToOne, false, 1.15, `${fixed(entry.runtimeCpuPerSessionMs ?? Number.NaN)} ms`);
    }
    if (entry.handledPerMessage !== undefined) {
      const worst = Math.max(entry.handledPerMessage, entry.heldHandledPerMessage ?? 0);
      ratio(`session messages handled per message published, ${entry.nodes} nodes, new and held sessions (${mode} ingress)`, worst, false, 1.1, `${fixed(entry.handledPerMessage)} / ${fixed(entry.heldHandledPerMessage ?? Number.NaN)}`);
    }
  }
  // Sessions in flight behind a 1 s model on one node: the smaller count near its ideal, the larger all finished.
  const flights = results.scaleOut ? (Array.isArray(results.scaleOut.inFlight) ? results.scaleOut.inFlight : [results.scaleOut.inFlight as unknown as InFlightRow]) : [];
  for (const flight of flights) {
    if (flight.sessions <= 200) {
      ratio(`${flight.sessions} sessions in flight behind a ${flight.providerLatencyMs} ms model, vs ideal`, flight.sessionsPerSecond / flight.idealPerSecond, true, 0.9, `${fixed(flight.sessionsPerSecond, 0)}/s of ${fixed(flight.idealPerSecond, 0)}/s`);
    } else {
      ratio(`${flight.sessions} sessions in flight behind a ${flight.providerLatencyMs} ms model: sessions failed`, flight.failures, false, 0, `${flight.failures} failed, ${fixed(flight.sessionsPerSecond, 0)}/s`);
    }
  }
  // Memory keeps up with the fleet: it follows the log at least as fast as the 200-concurrent workload appends to it.
  const follow = results.memory?.follow;
  if (follow) {
    const appended = bus * results.sequential.logEventsPerSession;
    const workload = `the workload's appends at 200: ${fixed(bus, 0)} sessions/s × ${fixed(results.sequential.logEventsPerSession, 1)} events = ${fixed(appended, 0)}/s`;
    ratio('memory indexing (full text) vs the 200-concurrent append rate', follow.indexPerSecond / appended, true, 1, `${fixed(follow.indexPerSecond, 0)}/s vs ${workload}`);
    ratio('memory indexing with vectors (scripted embedder) vs the 200-concurrent append rate', follow.embeddedPerSecond / appended, true, 1, `${fixed(follow.embeddedPerSecond, 0)}/s vs ${fixed(appended, 0)}/s`);
  }
  const at100k = results.memory?.searches.find((search) => search.indexed >= 100_000);
  if (at100k) checks.push({ goal: `memory ${at100k.mode} search p50 at ${at100k.indexed} messages`, value: at100k.latencyMs.p50, measured: `${fixed(at100k.latencyMs.p50)} ms`, target: '≤ 20 ms', met: at100k.latencyMs.p50 <= 20 });
  if (results.recall) {
    const recall = results.recall;
    checks.push({ goal: `turns that got recalled snippets at ${recall.concurrency} concurrent, embedder ${recall.embedDelayMs} ms`, value: recall.share, measured: `${recall.recalled} of ${recall.steps} (${fixed(recall.share * 100, 1)}%)`, target: '≥ 99%', met: recall.share >= 0.99 });
  }
  for (const entry of results.scaling.filter((scaling) => scaling.workers > 1)) {
    ratio(`I/O-bound tool throughput, ${entry.workers} workers vs linear`, entry.ratioToLinear, true, 0.9, `${fixed(entry.callsPerSecond, 0)} vs ${fixed(entry.linear, 0)} calls/s`);
  }
  return checks;
}

function sessionsTable(results: BenchResults): string[] {
  const lines = [
    '| system | sessions/s @1 | sessions/s @200 | p50 @1 (ms) | p99 @1 (ms) | p50 @200 (ms) | p99 @200 (ms) |',
    '| --- | ---: | ---: | ---: | ---: | ---: | ---: |',
  ];
  for (const row of results.sessions) {
    const name = row.versions.length > 0 ? `${row.name} (${row.versions.join(', ')})` : row.name;
    lines.push(
      `| ${name} | ${fixed(row.c1.sessionsPerSecond, 0)} | ${fixed(row.c200.sessionsPerSecond, 0)} | ${fixed(row.c1.latencyMs.p50, 3)} | ${fixed(row.c1.latencyMs.p99, 3)} | ${fixed(row.c200.latencyMs.p50, 1)} | ${fixed(row.c200.latencyMs.p99, 1)} |`,
    );
  }
  return lines;
}

function figuresTable(results: BenchResults): string[] {
  const { roundTrips: rt, sequential, firstDelta, heap } = results;
  const lines = ['| figure | measured | against | ratio |', '| --- | --- | --- | ---: |'];
  lines.push(`| tool-call round trip p50 / p99 (ms) | ${fixed(rt.toolCall.p50, 3)} / ${fixed(rt.toolCall.p99, 3)} | raw request/reply ${fixed(rt.request.p50, 3)} / ${fixed(rt.request.p99, 3)} | ${fixed(rt.toolCall.p50 / rt.request.p50)}× |`);
  if (rt.recordedToolCall) {
    lines.push(`| side-effecting tool call, result ledger on, p50 / p99 (ms) | ${fixed(rt.recordedToolCall.p50, 3)} / ${fixed(rt.recordedToolCall.p99, 3)} | raw request/reply ${fixed(rt.request.p50, 3)} / ${fixed(rt.request.p99, 3)} | ${fixed(rt.recordedToolCall.p50 / rt.request.p50)}× |`);
  }
  lines.push(
    `| sequential session latency p50 (ms) | ${fixed(sequential.latencyMs.p50)} | floor ${fixed(sequential.floorMs)} = ${sequential.ops.requests} requests × ${fixed(rt.request.p50, 3)} + ${sequential.ops.jetStreamGets} JetStream gets × ${fixed(rt.get.p50, 3)} + ${fixed(sequential.ops.appends, 1)} appends × ${fixed(rt.append.p50, 3)} | ${fixed(sequential.latencyMs.p50 / sequential.floorMs)}× |`,
  );
  lines.push(`| time to first delta p50 / p99 (ms) | through the bus ${fixed(firstDelta.bus.p50)} / ${fixed(firstDelta.bus.p99)} | provider service alone ${fixed(firstDelta.provider.p50)} / ${fixed(firstDelta.provider.p99)} | ${fixed(firstDelta.bus.p50 / firstDelta.provider.p50)}× |`);
  if (firstDelta.held) {
    lines.push(`| … a held session's next prompt p50 / p99 (ms) | through the bus ${fixed(firstDelta.held.p50)} / ${fixed(firstDelta.held.p99)} | provider service alone ${fixed(firstDelta.provider.p50)} / ${fixed(firstDelta.provider.p99)} | ${fixed(firstDelta.held.p50 / firstDelta.provider.p50)}× |`);
  }
  const mb = (bytes: number) => fixed(bytes / 1024 ** 2, 1);
  lines.push(
    `| heap per hydrated idle session (${heap.sessions} sessions, ${heap.eventsPerSession} log events each) | ${fixed(heap.bytesPerIdleSession / 1024)} KB (heap ${mb(heap.baselineBytes)} → ${mb(heap.hydratedBytes)} MB) | after passivation: ${heap.hostedPassivated} hosted, heap ${mb(heap.passivatedBytes)} MB (baseline held ${heap.hostedBefore} warm-up sessions, passivated too) | ${fixed(Math.max(0, heap.bytesPerSessionAfterPassivation) / 1024)} KB |`,
  );
  const base = results.contextPrep[0]!;
  for (const prep of results.contextPrep) {
    lines.push(
      `| context prep, ${prep.messages} messages (${prep.kept} fit): after a step / repeated with nothing new, p50 (µs); cold (ms) | ${micros(prep.stepMs.p50)} / ${micros(prep.warmMs.p50)}; cold ${fixed(prep.coldMs, 1)} | ${base.messages} messages ${micros(base.stepMs.p50)} / ${micros(base.warmMs.p50)} | ${fixed(prep.stepMs.p50 / base.stepMs.p50, 1)}× / ${fixed(prep.warmMs.p50 / base.warmMs.p50, 1)}× |`,
    );
  }
  if (results.coldStart) {
    const { bareNodeMs, upCompiledMs, upSourceMs, loadAverage } = results.coldStart;
    const low = (values: readonly number[]) => Math.min(...values);
    lines.push(
      `| cold start: \`agentbus up\` to ready, compiled / from the sources via tsx, best of ${upCompiledMs.length} (ms) | ${fixed(low(upCompiledMs), 0)} / ${fixed(low(upSourceMs), 0)} | bare \`node -e\` ${fixed(low(bareNodeMs), 0)} (load ${loadAverage.map((load) => fixed(load, 1)).join(' → ')}) | ${fixed(low(upCompiledMs) / low(bareNodeMs), 1)}× / ${fixed(low(upSourceMs) / low(bareNodeMs), 1)}× |`,
    );
  }
  if (results.cpuAt200) {
    const cpu = results.cpuAt200;
    const parts = Object.entries(cpu.perSessionMs).map(([name, ms]) => `${name} ${fixed(ms)}`).join(', ');
    const bus = results.sessions.find((entry) => entry.key === 'agentbus')?.c200.sessionsPerSecond ?? Number.NaN;
    lines.push(
      `| CPU per agentbus session at 200 concurrent (ms) | ${fixed(cpu.totalMs)} = ${parts} | ceiling on ${results.machine.cores} cores: ${fixed(cpu.ceilingPerSecond, 0)} sessions/s | ${fixed(bus / cpu.ceilingPerSecond)}× |`,
    );
  }
  for (const delay of results.loopDelays ?? []) {
    lines.push(`| event-loop delay of ${delay.service} under the load at 200, p99 / max (ms) | ${fixed(delay.p99Ms, 1)} / ${fixed(delay.maxMs, 1)} | 100 ms: where a node stops reading its socket in time | ${fixed(delay.maxMs / 100)}× |`);
  }
  if (results.dashboard) {
    const dash = results.dashboard;
    lines.push(
      `| dashboard CPU while ${dash.concurrency} sessions stream (% of one core; ms per session) | ${dash.cpuPercentOfCore === undefined ? 'n/a' : fixed(dash.cpuPercentOfCore, 1)}%; ${dash.cpuMsPerSession === undefined ? 'n/a' : fixed(dash.cpuMsPerSession, 3)} ms (${dash.sessions} sessions in ${fixed(dash.seconds, 1)} s) | a browser following one session got ${fixed(dash.messagesPerSecond, 1)} messages/s; that session's ${dash.followedDeltas} deltas came in ${dash.followedMessages} messages | ${dash.followedDeltas > 0 ? fixed(dash.followedMessages / dash.followedDeltas) : 'n/a'}× |`,
    );
  }
  if (results.memory) {
    const memory = results.memory;
    lines.push(
      `| memory indexing while catching up (log events/s) | ${fixed(memory.indexPerSecond, 0)} full text; ${memory.embedPerSecond === undefined ? 'no' : fixed(memory.embedPerSecond, 0)} chunks/s embedded (scripted) | the log's append rate ${fixed(memory.appendPerSecond, 0)}/s (pipelined, as the runtime appends) | ${fixed(memory.indexPerSecond / memory.appendPerSecond)}× |`,
    );
    for (const search of memory.searches) {
      lines.push(`| memory search at ${search.indexed} indexed messages, ${search.mode}, p50 / p99 (ms) | ${fixed(search.latencyMs.p50)} / ${fixed(search.latencyMs.p99)} | raw request/reply ${fixed(rt.request.p50, 3)} | ${fixed(search.latencyMs.p50 / rt.request.p50, 1)}× |`);
    }
    if (memory.follow) {
      lines.push(
        `| memory following the log, ${memory.follow.events} events appended while it runs (events/s) | ${fixed(memory.follow.indexPerSecond, 0)} full text; ${fixed(memory.follow.embeddedPerSecond, 0)} with vectors | the log's append rate ${fixed(memory.appendPerSecond, 0)}/s | ${fixed(memory.follow.indexPerSecond / memory.appendPerSecond)}× |`,
      );
    }
    if (memory.heapBytes !== undefined) lines.push(`| memory's heap at ${memory.searches.at(-1)?.indexed ?? 0} indexed messages (MB) | ${mb(memory.heapBytes)} | | |`);
  }
  if (results.recall) {
    const recall = results.recall;
    lines.push(
      `| turns whose first model call got recalled snippets, ${recall.concurrency} concurrent, embedder ${recall.embedDelayMs} ms, runtime waits 300 ms | ${recall.recalled} of ${recall.steps} at ${fixed(recall.sessionsPerSecond, 0)} sessions/s | every turn | ${fixed(recall.share)}× |`,
    );
    if (recall.indexPerSecond !== undefined && recall.appendPerSecond) {
      lines.push(`| memory indexing during that run (log events/s; behind at its end) | ${fixed(recall.indexPerSecond, 0)}; ${recall.indexLagEvents ?? 0} behind | the workload appended ${fixed(recall.appendPerSecond, 0)}/s | ${fixed(recall.indexPerSecond / recall.appendPerSecond)}× |`);
    }
  }
  if (results.scaleOut) {
    const scale = results.scaleOut;
    for (const entry of scale.nodes) {
      const one = scale.nodes.find((row) => row.ingress === entry.ingress && row.nodes === 1) ?? scale.nodes[0]!;
      const mode = entry.ingress ?? 'broadcast';
      lines.push(`| ${entry.nodes} runtime node(s), ${mode} ingress, workload sessions at 200 concurrent (sessions/s) | ${fixed(entry.sessionsPerSecond, 0)} (p50 ${fixed(entry.latencyMs.p50, 1)} ms) | linear from 1 node: ${fixed(one.sessionsPerSecond * entry.nodes, 0)} on ${results.machine.cores} cores | ${fixed(entry.ratioToLinear)}× |`);
      if (entry.runtimeCpuPerSessionMs !== undefined) {
        lines.push(`| ${entry.nodes} runtime node(s), ${mode} ingress: runtime CPU per session, all nodes (ms) | ${fixed(entry.runtimeCpuPerSessionMs)} | 1 node: ${fixed(one.runtimeCpuPerSessionMs ?? Number.NaN)} | ${entry.cpuRatioToOne === undefined ? 'n/a' : `${fixed(entry.cpuRatioToOne)}×`} |`);
      }
      if (entry.handledPerMessage !== undefined) {
        lines.push(`| ${entry.nodes} runtime node(s), ${mode} ingress: session messages handled per message published, new / held sessions | ${fixed(entry.handledPerMessage)} / ${fixed(entry.heldHandledPerMessage ?? Number.NaN)} | 1 | ${fixed(entry.handledPerMessage)}× |`);
      }
      if (entry.leaseClaimsPerNewSession !== undefined) {
        lines.push(`| ${entry.nodes} runtime node(s), ${mode} ingress: lease claims through the bucket per new session, all nodes | ${fixed(entry.leaseClaimsPerNewSession)} | 1 | ${fixed(entry.leaseClaimsPerNewSession)}× |`);
      }
    }
    // Results of an older bench hold one row, not a list.
    const flights = Array.isArray(scale.inFlight) ? scale.inFlight : [scale.inFlight as unknown as InFlightRow];
    const ceiling = results.cpuAt200?.ceilingPerSecond;
    for (const flight of flights) {
      const bound = ceiling === undefined ? `ideal ${fixed(flight.idealPerSecond, 0)}` : `ideal ${fixed(flight.idealPerSecond, 0)}; CPU ceiling ${fixed(ceiling, 0)}`;
      lines.push(
        `| ${flight.sessions} sessions in flight, one ${flight.providerLatencyMs} ms model call each (sessions/s) | ${fixed(flight.sessionsPerSecond, 0)} (p50 ${fixed(flight.latencyMs.p50, 0)} ms, ${flight.failures} failed${flight.firstRoundMs ? `; steady state, after a first round of p50 ${fixed(flight.firstRoundMs.p50, 0)} ms` : ''}); runtime RSS ${flight.runtimeRssBytes === undefined ? 'n/a' : mb(flight.runtimeRssBytes)} MB, runtime CPU ${fixed(flight.runtimeCpuPerSessionMs ?? Number.NaN)} ms/session | ${bound} | ${fixed(flight.sessionsPerSecond / Math.min(flight.idealPerSecond, ceiling ?? Infinity))}× |`,
      );
    }
  }
  const setup = results.scalingSetup;
  for (const entry of results.scaling) {
    lines.push(`| ${setup.toolDelayMs} ms tool, ${entry.workers} worker(s) × ${setup.slotsPerWorker} slots (calls/s) | ${fixed(entry.callsPerSecond, 0)} | linear ${fixed(entry.linear, 0)} | ${fixed(entry.ratioToLinear)}× |`);
  }
  return lines;
}

function targetsTable(targets: readonly TargetCheck[]): string[] {
  const lines = ['| goal | measured | ratio | target | met |', '| --- | --- | ---: | --- | --- |'];
  for (const check of targets) lines.push(`| ${check.goal} | ${check.measured} | ${fixed(check.value)} | ${check.target} | ${check.met ? 'yes' : 'no'} |`);
  return lines;
}

/** The console table. */
export function renderTable(results: BenchResults, targets: readonly TargetCheck[]): string {
  return [`agentbus bench (${results.mode}) — ${results.machineLine}`, '', ...sessionsTable(results), '', ...figuresTable(results), '', ...targetsTable(targets)].join('\n');
}

/** The markdown report written beside the JSON. */
export function renderMarkdown(results: BenchResults, targets: readonly TargetCheck[]): string {
  return [
    `# agentbus bench — ${results.mode} run, ${results.date}`,
    '',
    `Machine: ${results.machineLine}`,
    '',
    `Workload: ${results.workload.modelCalls} model calls with short text deltas and ${results.workload.toolCalls} zero-latency read-only tool calls (2 in parallel, twice), then an answer. Run took ${fixed(results.seconds, 0)} s. Raw numbers: \`${results.mode === 'full' ? 'latest' : 'quick'}.json\`; how each figure is made: \`bench/README.md\`.`,
    '',
    '## Sessions',
    '',
    ...sessionsTable(results),
    '',
    '## Figures measured in the same run',
    '',
    ...figuresTable(results),
    '',
    '## Goals',
    '',
    ...targetsTable(targets),
    '',
  ].join('\n');
}
