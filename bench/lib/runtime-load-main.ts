import { spawn } from 'node:child_process';
import { mkdtemp, rm, writeFile } from 'node:fs/promises';
import { loadavg, tmpdir } from 'node:os';
import { join } from 'node:path';
import { connect } from '@nats-io/transport-node';
import { pino } from 'pino';
import { startServiceProcess } from '../../test/helpers/service-process.ts';
import type { ServiceProcess } from '../../test/helpers/service-process.ts';
import { createProviderClient } from '../../src/bus/provider-client.ts';
import { createCodec, createSubjects } from '../../src/protocol/index.ts';
import { createAgentbusClient } from './agentbus-client.ts';
import { cpuTimeMs } from './cpu.ts';
import { readLoopDelays } from './event-loop.ts';
import { closedLoop } from './load.ts';
import { measureInFlight } from './in-flight.ts';
import { startNatsServer } from './nats-server.ts';
import { summarize } from './stats.ts';
import { PROMPT, providerScript } from './workload.ts';

// Only the runtime's figures under the bench's workload, for measuring a runtime change without the whole bench:
// `node --import tsx bench/lib/runtime-load-main.ts [--ms=6000] [--first-delta=40] [--in-flight=200] [--profile=DIR] [--peer]`.
// Runtime CPU per session and event-loop p99 at 200 concurrent (one node), time to first delta against the provider
// alone, and sessions in flight behind a 1 s model. `--peer` runs LangGraph.js in this process first (needs the
// bench's own dependencies) and reports its CPU per session from process.cpuUsage(), the same run.
const arg = (name: string) => process.argv.find((value) => value.startsWith(`--${name}=`))?.slice(name.length + 3);
const durationMs = Number(arg('ms') ?? 6_000);
const firstDeltaRounds = Number(arg('first-delta') ?? 40);
const concurrency = Number(arg('concurrency') ?? 200);
const inFlight = Number(arg('in-flight') ?? 200);
const profileDir = arg('profile');
const out: Record<string, unknown> = { loadBefore: loadavg()[0] };
const log = (text: string) => process.stderr.write(`${text}\n`);

if (process.argv.includes('--peer')) {
  // A path in a variable, as bench/main.ts does: the peers' packages live in bench/node_modules (npm run bench
  // installs them), which `npm run typecheck` must not need.
  const peerModule = '../peers/langgraph.ts';
  const { runLangGraphSession } = (await import(peerModule)) as { runLangGraphSession: (prompt: string) => Promise<string> };
  await closedLoop(async () => void (await runLangGraphSession(PROMPT)), { concurrency: 50, durationMs: 1_000 });
  const cpu0 = process.cpuUsage();
  const load = await closedLoop(async () => void (await runLangGraphSession(PROMPT)), { concurrency, durationMs });
  const cpu = process.cpuUsage(cpu0);
  out.langgraph = { sessionsPerSecond: load.sessionsPerSecond, cpuPerSessionMs: (cpu.user + cpu.system) / 1000 / load.sessions };
  log(`langgraph: ${JSON.stringify(out.langgraph)}`);
}

const work = await mkdtemp(join(tmpdir(), 'agentbus-runtime-load-'));
const server = await startNatsServer();
const processes: ServiceProcess[] = [];
const start = (entry: string, env: Record<string, string> = {}, flags: string[] = []) => {
  const started = startServiceProcess(entry, { NATS_URL: server.url, LOG_LEVEL: 'info', ...env }, flags);
  processes.push(started);
  return started;
};
const nc = await connect({ servers: server.url, name: 'runtime-load-driver' });
try {
  const scriptPath = join(work, 'script.json');
  await writeFile(scriptPath, JSON.stringify(providerScript()));
  const slowScriptPath = join(work, 'slow.json');
  await writeFile(slowScriptPath, JSON.stringify({ responses: [{ text: 'ok ok', chunkSize: 3, delayMs: 1000 }] }));
  const provider = start('services/provider/main.ts', { AGENTBUS_SCRIPT: scriptPath });
  const tools = start('bench/lib/tool-worker-main.ts');
  const runtime = start('services/runtime/main.ts', {}, [...(profileDir ? ['--cpu-prof', `--cpu-prof-dir=${profileDir}`] : []), ...(arg('node-flags')?.split(',') ?? [])]);
  await Promise.all([provider.waitFor('provider service started', 120_000), tools.waitFor('bench tool worker ready', 120_000), runtime.waitFor('runtime started', 120_000)]);
  const client = await createAgentbusClient(nc, { watchDeltas: true });
  await closedLoop(async (i) => void (await client.runTurn(`w${i}`)), { concurrency: 50, durationMs: 2_000 });
  const pids = { runtime: runtime.child.pid, provider: provider.child.pid, tools: tools.child.pid, nats: server.pid };
  // --count: messages per session on the session's subjects by kind (live.<type>, log), for finding what to cut.
  const counts = new Map<string, number>();
  const counter = process.argv.includes('--count')
    ? nc.subscribe('agentbus.bench.sessions.*.>', { callback: (_e, m) => { const kind = m.subject.split('.').slice(4).join('.'); counts.set(kind, (counts.get(kind) ?? 0) + 1); } })
    : undefined;
  log(`runtime pid ${runtime.child.pid}`);
  const before = Object.fromEntries(Object.entries(pids).map(([name, pid]) => [name, cpuTimeMs(pid) ?? 0]));
  // --perf: instructions the runtime retired per session (`perf stat`), a figure far less moved by other processes
  // on the machine than CPU time is.
  const perfStat = process.argv.includes('--perf') ? spawn('perf', ['stat', '-x,', '-e', 'instructions,task-clock', '-p', String(runtime.child.pid)], { stdio: ['ignore', 'ignore', 'pipe'] }) : undefined;
  let perfOut = '';
  perfStat?.stderr?.on('data', (chunk: Buffer) => (perfOut += chunk.toString()));
  const load = await closedLoop(async (i) => void (await client.runTurn(`c${i}`)), { concurrency, durationMs });
  if (perfStat) {
    const ended = new Promise((resolve) => perfStat.once('exit', resolve));
    perfStat.kill('SIGINT');
    await ended;
    const instructions = Number(/^(\d+),,instructions/m.exec(perfOut)?.[1] ?? NaN);
    out.instructionsPerSession = instructions / Math.max(1, load.sessions);
    log(`runtime instructions per session: ${(instructions / Math.max(1, load.sessions) / 1e6).toFixed(2)} M`);
  }
  const cpu = Object.fromEntries(Object.entries(pids).map(([name, pid]) => [name, ((cpuTimeMs(pid) ?? 0) - before[name]!) / Math.max(1, load.sessions)]));
  counter?.unsubscribe();
  if (counter) log(`per session: ${JSON.stringify(Object.fromEntries([...counts].map(([k, v]) => [k, +(v / load.sessions).toFixed(2)])))}`);
  const loop = (await readLoopDelays(nc)).find((delay) => delay.service === 'agentbus-runtime');
  out.c200 = { sessionsPerSecond: load.sessionsPerSecond, failures: load.failures, cpuPerSessionMs: cpu, loopP99Ms: loop?.p99Ms, loopMaxMs: loop?.maxMs };
  log(`200 concurrent: ${JSON.stringify(out.c200)}`);

  const subjects = createSubjects('agentbus');
  const providerClient = createProviderClient({ nc, subjects, codec: createCodec(), logger: pino({ level: 'warn' }) });
  const busFirst: number[] = [];
  const heldFirst: number[] = [];
  const providerFirst: number[] = [];
  for (let i = 0; i < firstDeltaRounds; i++) {
    const seen = await client.runTurn(`fd${i}`);
    if (seen.firstDeltaMs !== undefined) busFirst.push(seen.firstDeltaMs);
    // The same session's next prompt: held by the node (see bench/main.ts).
    const held = await client.runTurn(`fd${i}`);
    if (held.firstDeltaMs !== undefined) heldFirst.push(held.firstDeltaMs);
    const t0 = performance.now();
    for await (const chunk of providerClient.generate({ v: 1, requestId: `q${i}`, model: 'scripted:default', messages: [{ role: 'user', content: PROMPT }], tools: [], tenant: 'bench', sessionId: `fdp${i}` })) {
      if (chunk.type === 'text-delta' && providerFirst.length === i) providerFirst.push(performance.now() - t0);
    }
  }
  const bus = summarize(busFirst);
  const alone = summarize(providerFirst);
  const held = summarize(heldFirst);
  out.firstDelta = { busP50Ms: bus.p50, heldP50Ms: held.p50, providerP50Ms: alone.p50, ratio: bus.p50 / alone.p50, heldRatio: held.p50 / alone.p50 };
  log(`first delta: ${JSON.stringify(out.firstDelta)}`);

  if (inFlight > 0) {
    await provider.stop();
    const slow = start('services/provider/main.ts', { AGENTBUS_SCRIPT: slowScriptPath });
    await slow.waitFor('provider service started', 120_000);
    const [row] = await measureInFlight({
      runtimePid: runtime.child.pid,
      session: async (sessionId) => void (await client.runTurn(sessionId, { text: 'hi', timeoutMs: 60_000 })),
      counts: [inFlight],
      providerLatencyMs: 1000,
      windowMs: Math.max(durationMs, 4_000),
      tag: 's',
      log,
    });
    out.inFlight = row && { sessions: inFlight, sessionsPerSecond: row.sessionsPerSecond, ofIdeal: row.sessionsPerSecond / row.idealPerSecond, failures: row.failures, firstRoundP50Ms: row.firstRoundMs?.p50, runtimeCpuPerSessionMs: row.runtimeCpuPerSessionMs };
  }
  client.close();
} finally {
  out.loadAfter = loadavg()[0];
  await nc.close().catch(() => undefined);
  await Promise.all(processes.map((child) => child.stop()));
  await server.stop();
  await rm(work, { recursive: true, force: true });
}
process.stdout.write(`${JSON.stringify(out)}\n`);
