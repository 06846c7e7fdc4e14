import { mkdtemp, rm, writeFile } from 'node:fs/promises';
import { loadavg, tmpdir } from 'node:os';
import { join } from 'node:path';
import { headers } from '@nats-io/nats-core';
import { connect } from '@nats-io/transport-node';
import { startServiceProcess } from '../../test/helpers/service-process.ts';
import type { ServiceProcess } from '../../test/helpers/service-process.ts';
import { createCodec } from '../../src/protocol/index.ts';
import type { PromptReply } from '../../src/protocol/index.ts';
import { cpuTimeMs } from './cpu.ts';
import { startNatsServer } from './nats-server.ts';
import { summarize } from './stats.ts';
import { steadyLoop } from './steady-loop.ts';

// Where one session's wall time goes when hundreds are in flight behind a 1 s model: every event of every session
// (log and live) with its `ts` and the time this client saw it, and the client's own send/accept/end times.
// `node --import tsx bench/lib/in-flight-trace-main.ts [--sessions=200] [--ms=8000] [--ramp-ms=5000] [--profile=DIR]`.
const arg = (name: string) => process.argv.find((value) => value.startsWith(`--${name}=`))?.slice(name.length + 3);
const sessions = Number(arg('sessions') ?? 200);
const durationMs = Number(arg('ms') ?? 8_000);
const rampMs = Number(arg('ramp-ms') ?? 5_000);
const profileDir = arg('profile');
const log = (text: string) => process.stderr.write(`${text}\n`);
const clock = () => performance.timeOrigin + performance.now();
const codec = createCodec();

interface Seen {
  readonly kind: string;
  readonly ts: number;
  readonly at: number;
}
interface Trace {
  readonly index: number;
  readonly send: number;
  accept?: number;
  end?: number;
  readonly seen: Seen[];
}

const work = await mkdtemp(join(tmpdir(), 'agentbus-in-flight-'));
const server = await startNatsServer();
const processes: ServiceProcess[] = [];
const nc = await connect({ servers: server.url, name: 'in-flight-trace' });
try {
  const slowScriptPath = join(work, 'slow.json');
  await writeFile(slowScriptPath, JSON.stringify({ responses: [{ text: 'ok ok', chunkSize: 3, delayMs: 1000 }] }));
  const start = (entry: string, env: Record<string, string>, flags: string[] = []) => {
    const started = startServiceProcess(entry, { NATS_URL: server.url, LOG_LEVEL: 'info', ...env }, flags);
    processes.push(started);
    return started;
  };
  const provider = start('services/provider/main.ts', { AGENTBUS_SCRIPT: slowScriptPath });
  const runtime = start('services/runtime/main.ts', { AGENTBUS_TENANT_RATE: '0', AGENTBUS_SESSION_RATE: '0' }, profileDir ? ['--cpu-prof', `--cpu-prof-dir=${profileDir}`] : []);
  await Promise.all([provider.waitFor('provider service started', 120_000), runtime.waitFor('runtime started', 120_000)]);

  const traces = new Map<string, Trace>();
  const ended = new Map<string, () => void>();
  nc.subscribe('agentbus.bench.sessions.*.>', {
    callback: (error, message) => {
      if (error) return;
      const at = clock();
      const parts = message.subject.split('.');
      const trace = traces.get(parts[3] ?? '');
      if (!trace) return;
      const event = codec.decode(message.data, message.headers?.get('Content-Type')) as { type: string; ts: number; data: { value?: unknown; kind?: string } };
      const detail = event.type === 'state' ? `:${JSON.stringify(event.data.value)}` : event.type === 'progress' ? `:${event.data.kind}` : '';
      trace.seen.push({ kind: `${parts[4]}:${event.type}${detail}`, ts: event.ts, at });
      if (event.type === 'turn.ended') ended.get(parts[3] ?? '')?.();
    },
  });
  await nc.flush();
  const promptHeaders = headers();
  promptHeaders.set('Content-Type', 'application/msgpack');

  const runSession = async (index: number) => {
    const sessionId = `s${index}`;
    const trace: Trace = { index, send: clock(), seen: [] };
    traces.set(sessionId, trace);
    const done = new Promise<void>((resolve, reject) => {
      const timer = setTimeout(() => reject(new Error(`${sessionId}: no turn.ended`)), 60_000);
      ended.set(sessionId, () => {
        clearTimeout(timer);
        resolve();
      });
    });
    const reply = await nc.request(`agentbus.bench.sessions.${sessionId}.prompt`, codec.encode({ text: 'hi' }), { timeout: 60_000, headers: promptHeaders });
    trace.accept = clock();
    const answer = codec.decode(reply.data, reply.headers?.get('Content-Type')) as PromptReply;
    if (!answer.accepted) throw new Error(`refused: ${JSON.stringify(answer.error)}`);
    await done;
    trace.end = clock();
    ended.delete(sessionId);
  };

  const cpu0 = cpuTimeMs(runtime.child.pid) ?? 0;
  const provider0 = cpuTimeMs(provider.child.pid) ?? 0;
  const nats0 = cpuTimeMs(server.pid) ?? 0;
  const self0 = process.cpuUsage();
  const load0 = loadavg()[0] ?? 0;
  const run = await steadyLoop(runSession, { concurrency: sessions, windowMs: durationMs, minRampMs: rampMs });
  const count = run.spans.length;
  const cpu = (cpuTimeMs(runtime.child.pid) ?? 0) - cpu0;
  const providerCpu = (cpuTimeMs(provider.child.pid) ?? 0) - provider0;
  const natsCpu = (cpuTimeMs(server.pid) ?? 0) - nats0;
  const self = process.cpuUsage(self0);
  const lastEnd = Math.max(...run.spans.map((span) => span.end));
  const firstStart = Math.min(...run.spans.map((span) => span.start));
  const whole = run.spans.filter((span) => span.ok).length / ((lastEnd - firstStart) / 1000);
  log(`load ${load0.toFixed(2)}; ${count} sessions; CPU ms/session: runtime ${(cpu / count).toFixed(2)}, provider ${(providerCpu / count).toFixed(2)}, nats-server ${(natsCpu / count).toFixed(2)}, client ${((self.user + self.system) / 1000 / count).toFixed(2)}`);
  log(`steady window ${durationMs} ms after a ramp of ${run.rampMs.toFixed(0)} ms: ${run.sessionsPerSecond.toFixed(1)}/s of an ideal ${sessions}/s (${(run.sessionsPerSecond / sessions).toFixed(2)}x), p50 ${run.latencyMs.p50.toFixed(0)} ms, mean ${run.latencyMs.mean.toFixed(0)}; first round p50 ${run.firstRoundMs.p50.toFixed(0)} ms, max ${run.firstRoundMs.max.toFixed(0)}; ${run.failures} failed`);
  log(`the same run counted as closedLoop does (every session over first start to last end): ${whole.toFixed(1)}/s (${(whole / sessions).toFixed(2)}x)`);

  // Segments, each from one mark to the next, medians over sessions past the first round.
  const all = [...traces.values()].filter((trace) => trace.end !== undefined && trace.index >= sessions);
  const first = (trace: Trace, kind: string, field: 'ts' | 'at' = 'ts') => trace.seen.find((seen) => seen.kind === kind)?.[field];
  const nth = (trace: Trace, kind: string, n: number) => trace.seen.filter((seen) => seen.kind === kind)[n]?.ts;
  const kinds = new Map<string, number>();
  for (const trace of all) for (const seen of trace.seen) kinds.set(seen.kind, (kinds.get(seen.kind) ?? 0) + 1);
  log(`event kinds per session: ${[...kinds].map(([kind, count]) => `${kind}×${(count / all.length).toFixed(2)}`).join(', ')}`);
  const marks: Array<[string, (trace: Trace) => number | undefined]> = [
    ['client send', (trace) => trace.send],
    ['log user.message ts', (trace) => first(trace, 'log:user.message')],
    ['log turn.started ts', (trace) => first(trace, 'log:turn.started')],
    ['live progress provider_call ts', (trace) => first(trace, 'live:progress:provider_call')],
    ['first delta ts', (trace) => nth(trace, 'live:assistant.delta', 0)],
    ['second delta ts', (trace) => nth(trace, 'live:assistant.delta', 1)],
    ['log assistant.message ts', (trace) => first(trace, 'log:assistant.message')],
    ['log turn.ended ts', (trace) => first(trace, 'log:turn.ended')],
    ['client saw turn.ended', (trace) => first(trace, 'log:turn.ended', 'at')],
    ['client end', (trace) => trace.end],
  ];
  for (let index = 1; index < marks.length; index += 1) {
    const [fromName, from] = marks[index - 1]!;
    const [toName, to] = marks[index]!;
    const values = all.map((trace) => [from(trace), to(trace)]).filter((pair): pair is [number, number] => pair[0] !== undefined && pair[1] !== undefined).map(([a, b]) => b - a);
    const summary = summarize(values);
    log(`  ${fromName} → ${toName}: p50 ${summary.p50.toFixed(1)} ms, mean ${summary.mean.toFixed(1)}, p99 ${summary.p99.toFixed(1)}, n ${summary.n}`);
  }
  // The accept reply is not on the way to the answer: the turn goes on whether or not it has been sent.
  const accepts = summarize(all.map((trace) => (trace.accept ?? Number.NaN) - trace.send).filter(Number.isFinite));
  log(`  client send → client accept: p50 ${accepts.p50.toFixed(1)} ms, mean ${accepts.mean.toFixed(1)}`);
  // The worker's gap: its previous session's end to its next start; and sessions by round (a worker's n-th).
  const byWorker = new Map<number, typeof run.spans[number][]>();
  for (const span of run.spans) byWorker.set(span.worker, [...(byWorker.get(span.worker) ?? []), span]);
  const gaps: number[] = [];
  for (const list of byWorker.values()) for (let index = 1; index < list.length; index += 1) gaps.push(list[index]!.start - list[index - 1]!.end);
  const gap = summarize(gaps);
  log(`  worker gap (end → next start): p50 ${gap.p50.toFixed(2)} ms, mean ${gap.mean.toFixed(2)}, p99 ${gap.p99.toFixed(2)}`);
  const total = summarize(all.map((trace) => trace.end! - trace.send));
  log(`  session wall (after round 1): p50 ${total.p50.toFixed(1)} ms, mean ${total.mean.toFixed(1)}, p99 ${total.p99.toFixed(1)}, max ${total.max.toFixed(1)}`);
  for (let round = 0; round < 4; round += 1) {
    const summary = summarize([...byWorker.values()].map((list) => list[round]).filter((span) => span !== undefined).map((span) => span.end - span.start));
    log(`  round ${round + 1}: p50 ${summary.p50.toFixed(1)} ms, mean ${summary.mean.toFixed(1)}, max ${summary.max.toFixed(1)}`);
  }
  const idle = [...byWorker.values()].map((list) => lastEnd - list.at(-1)!.end);
  log(`  tail idle per worker: mean ${(idle.reduce((sum, value) => sum + value, 0) / idle.length).toFixed(0)} ms (first start to last end ${(lastEnd - firstStart).toFixed(0)} ms)`);
  if (profileDir) {
    // The profile is written when the runtime exits on its own: give it longer than ServiceProcess.stop's 5 s.
    runtime.child.kill('SIGTERM');
    let timer: ReturnType<typeof setTimeout> | undefined;
    await Promise.race([runtime.exited, new Promise((resolve) => (timer = setTimeout(resolve, 60_000)))]);
    clearTimeout(timer);
  }
  const example = all[Math.floor(all.length / 2)]!;
  log(`example ${JSON.stringify(example.seen.map((seen) => `${seen.kind}@${(seen.ts - example.send).toFixed(0)}/${(seen.at - example.send).toFixed(0)}`))}`);
} finally {
  await nc.close().catch(() => undefined);
  await Promise.all(processes.map((child) => child.stop()));
  await server.stop();
  await rm(work, { recursive: true, force: true });
}
