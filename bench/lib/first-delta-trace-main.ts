import { mkdtemp, rm, writeFile } from 'node:fs/promises';
import { loadavg, tmpdir } from 'node:os';
import { join } from 'node:path';
import { connect } from '@nats-io/transport-node';
import type { MsgHdrs } from '@nats-io/nats-core';
import { pino } from 'pino';
import { createProviderClient } from '../../src/bus/provider-client.ts';
import { createCodec, createSubjects } from '../../src/protocol/index.ts';
import type { GenerateRequest } from '../../src/protocol/index.ts';
import { PROMPT } from './workload.ts';
import { startServiceProcess } from '../../test/helpers/service-process.ts';
import type { ServiceProcess } from '../../test/helpers/service-process.ts';
import { createAgentbusClient } from './agentbus-client.ts';
import { closedLoop } from './load.ts';
import { cpuTimeMs } from './cpu.ts';
import { startNatsServer } from './nats-server.ts';
import { providerScript } from './workload.ts';

// Sessions one at a time, seen from a bus tap (issue #17's time to first delta and sequential latency): every message
// on the server (a second connection subscribed to `>`) with the time this process saw it, labelled by subject (the
// session id and inbox tokens taken out; a reply is labelled with its request's label). Each round runs a new session
// (its first prompt: the workload) and then a second prompt to the same session, held by its node (one provider
// call), and prints, for each kind, the median time of each message from the prompt's publish and the gap to the one
// before. The tap is a process too: under load it sees messages 0.1-0.4 ms late, so read its gaps for order and
// rough size; the client's own figures (`client p50`, `first delta p50`) do not depend on it, and `--no-tap` leaves it
// out altogether (for A/B runs). Also: a raw request/reply to an echo process, the CPU of each process per round (a
// new session's turn and a held one's), and with `--provider-rounds=N` the provider alone, first chunk, for the
// bench's request and for the request the runtime sent (captured by the tap), alternating.
// `node --import tsx bench/lib/first-delta-trace-main.ts [--sessions=60] [--raw] [--no-tap] [--provider-rounds=N]
//   [--runtime-root=DIR] [--dump=FILE]`: `--runtime-root` starts the runtime from another checkout (an A/B against it),
// `--dump` writes every session's tapped messages as JSON.
const arg = (name: string) => process.argv.find((value) => value.startsWith(`--${name}=`))?.slice(name.length + 3);
const sessions = Number(arg('sessions') ?? 60);
const log = (text: string) => process.stderr.write(`${text}\n`);

interface Tapped {
  readonly at: number;
  readonly label: string;
}

const work = await mkdtemp(join(tmpdir(), 'agentbus-first-delta-'));
const server = await startNatsServer();
const processes: ServiceProcess[] = [];
const nc = await connect({ servers: server.url, name: 'first-delta-client' });
const tap = await connect({ servers: server.url, name: 'first-delta-tap' });
try {
  const scriptPath = join(work, 'script.json');
  await writeFile(scriptPath, JSON.stringify(providerScript()));
  const start = (entry: string, env: Record<string, string> = {}) => {
    const started = startServiceProcess(entry, { NATS_URL: server.url, LOG_LEVEL: 'info', ...env }, []);
    processes.push(started);
    return started;
  };
  const provider = start('services/provider/main.ts', { AGENTBUS_SCRIPT: scriptPath });
  const tools = start('bench/lib/tool-worker-main.ts');
  // --runtime-root=DIR: the runtime from another checkout (an A/B against it); the rest from this one.
  const runtimeRoot = arg('runtime-root');
  const runtime = start(runtimeRoot ? join(runtimeRoot, 'services/runtime/main.ts') : 'services/runtime/main.ts');
  await Promise.all([provider.waitFor('provider service started', 120_000), tools.waitFor('bench tool worker ready', 120_000), runtime.waitFor('runtime started', 120_000)]);
  const client = await createAgentbusClient(nc, { watchDeltas: true });
  await closedLoop(async (i) => void (await client.runTurn(`w${i}`)), { concurrency: 20, durationMs: 3_000 });
  await closedLoop(async (i) => void (await client.runTurn(`v${i}`)), { concurrency: 1, durationMs: 1_000 });

  let current: Tapped[] | undefined;
  let captured: { data: Uint8Array; headers: MsgHdrs } | undefined;
  let providerP50 = NaN;
  let sid = '';
  const replyLabels = new Map<string, string>();
  const labelOf = (subject: string) =>
    subject
      .split('.')
      .map((part) => (part === sid ? '<s>' : part.length >= 16 && /[A-Za-z0-9]{16,}/.test(part) ? '*' : part))
      .join('.');
  if (!process.argv.includes('--no-tap')) tap.subscribe('>', {
    callback: (_error, message) => {
      const at = performance.timeOrigin + performance.now();
      if (!current) return;
      const asReply = replyLabels.get(message.subject);
      const label = asReply ? `  <- ${asReply}` : labelOf(message.subject);
      if (message.reply && !asReply) replyLabels.set(message.reply, label);
      if (!captured && label.endsWith('.generate') && message.headers) captured = { data: message.data, headers: message.headers };
      current.push({ at, label });
    },
  });
  await tap.flush();

  // Calibration: a raw request/reply to an echo responder in another process, seen by the same tap.
  const { spawn } = await import('node:child_process');
  const echo = spawn(process.execPath, ['-e', `const { connect } = require('@nats-io/transport-node'); connect({ servers: '${server.url}' }).then(async (c) => { c.subscribe('echo', { callback: (_e, m) => m.respond(m.data) }); await c.flush(); console.log('ready'); });`], { stdio: ['ignore', 'pipe', 'inherit'] });
  await new Promise((resolve) => echo.stdout.once('data', resolve));
  const rtt: number[] = [];
  const echoGap: number[] = [];
  for (let i = 0; i < 300; i++) {
    sid = 'echo';
    current = [];
    replyLabels.clear();
    const t0 = performance.now();
    await nc.request('echo', new Uint8Array(200));
    rtt.push(performance.now() - t0);
    await new Promise((resolve) => setTimeout(resolve, 2));
    if (current.length >= 2) echoGap.push(current[1]!.at - current[0]!.at);
    current = undefined;
  }
  echo.kill();

  const runs = { created: [] as Tapped[][], held: [] as Tapped[][] };
  const client1 = { created: [] as number[], held: [] as number[] };
  const firstDelta = { created: [] as number[], held: [] as number[] };
  const pids = { runtime: runtime.child.pid, provider: provider.child.pid, tools: tools.child.pid, nats: server.pid };
  const cpuBefore = Object.fromEntries(Object.entries(pids).map(([name, pid]) => [name, cpuTimeMs(pid) ?? 0]));
  const loopStart = performance.now();
  for (let i = 0; i < sessions; i++) {
    for (const kind of ['created', 'held'] as const) {
      sid = `t${i}x`;
      current = [];
      replyLabels.clear();
      const t0 = performance.timeOrigin + performance.now();
      const seen = await client.runTurn(sid);
      const elapsed = performance.timeOrigin + performance.now() - t0;
      await new Promise((resolve) => setTimeout(resolve, 5));
      const tapped = current;
      current = undefined;
      const sent = tapped.find((entry) => entry.label.endsWith('.prompt'))?.at ?? t0;
      runs[kind].push(tapped.map((entry) => ({ at: entry.at - sent, label: entry.label })));
      client1[kind].push(elapsed);
      if (seen.firstDeltaMs !== undefined) firstDelta[kind].push(seen.firstDeltaMs);
    }
  }
  const loopMs = performance.now() - loopStart;
  // The provider alone, first chunk: the bench's request (one user message, no tools) against the request the runtime
  // sent for a new session's first step (captured above), alternating.
  if (Number(arg('provider-rounds') ?? 0) > 0) {
    const codec = createCodec();
    const providerClient = createProviderClient({ nc, subjects: createSubjects('agentbus'), codec, logger: pino({ level: 'warn' }) });
    const generateOnce = async (request: GenerateRequest) => {
      const t0 = performance.now();
      let first = NaN;
      for await (const chunk of providerClient.generate(request)) if (chunk.type === 'text-delta' && Number.isNaN(first)) first = performance.now() - t0;
      return first;
    };
    const runtimeRequest = captured ? (codec.decode(captured.data, 'application/msgpack') as GenerateRequest) : undefined;
    const small: number[] = [];
    const real: number[] = [];
    for (let i = 0; i < Number(arg('provider-rounds') ?? 0); i++) {
      small.push(await generateOnce({ v: 1, requestId: `s${i}`, model: 'scripted:default', messages: [{ role: 'user', content: PROMPT }], tools: [], tenant: 'bench', sessionId: `pa${i}` }));
      if (runtimeRequest) real.push(await generateOnce({ ...runtimeRequest, requestId: `r${i}`, sessionId: `pb${i}` }));
    }
    const med = (values: number[]) => [...values].sort((a, b) => a - b)[values.length >> 1]!;
    log(`provider alone, first text-delta p50: the bench's request ${med(small).toFixed(3)} ms, the runtime's (${captured?.data.length} bytes, ${runtimeRequest?.tools.length} tools, ${runtimeRequest?.messages.length} messages) ${real.length ? med(real).toFixed(3) : 'not captured'} ms`);
    providerP50 = med(small);
  }
  const cpuPerPair = Object.fromEntries(Object.entries(pids).map(([name, pid]) => [name, +(((cpuTimeMs(pid) ?? 0) - cpuBefore[name]!) / sessions).toFixed(2)]));
  log(`CPU ms per pair (a new session's turn + a held one's): ${JSON.stringify(cpuPerPair)}, wall per pair ${(loopMs / sessions).toFixed(2)} ms`);
  client.close();
  const dumpFile = arg('dump');
  if (dumpFile) await writeFile(dumpFile, JSON.stringify(runs));
  const median = (values: number[]) => {
    const sorted = [...values].sort((a, b) => a - b);
    return sorted[Math.floor(sorted.length / 2)] ?? NaN;
  };
  log(`raw request/reply to another process: client p50 ${median(rtt).toFixed(3)} ms, tap request -> reply p50 ${median(echoGap).toFixed(3)} ms`);
  for (const kind of ['created', 'held'] as const) {
    log(`\n== ${kind}: client p50 ${median(client1[kind]).toFixed(2)} ms, first delta p50 ${median(firstDelta[kind]).toFixed(2)} ms`);
    // k-th occurrence of a label, median time over the sessions that had it
    const keyed = new Map<string, number[]>();
    for (const run of runs[kind]) {
      const counts = new Map<string, number>();
      for (const entry of run) {
        const n = (counts.get(entry.label) ?? 0) + 1;
        counts.set(entry.label, n);
        const key = `${entry.label} #${n}`;
        keyed.set(key, [...(keyed.get(key) ?? []), entry.at]);
      }
    }
    const rows = [...keyed].map(([key, ats]) => ({ key, at: median(ats), n: ats.length })).sort((a, b) => a.at - b.at);
    let previous = 0;
    for (const row of rows) {
      if (row.n < runs[kind].length / 2) continue;
      log(`${row.at.toFixed(3).padStart(8)} ${(row.at - previous).toFixed(3).padStart(7)}  ${row.key}${row.n < runs[kind].length ? ` (${row.n})` : ''}`);
      previous = row.at;
    }
    if (process.argv.includes('--raw')) {
      const run = runs[kind][Math.floor(runs[kind].length / 2)]!;
      log(`-- one ${kind} session, raw`);
      for (const entry of run) log(`${entry.at.toFixed(3).padStart(8)}  ${entry.label}`);
    }
  }
  process.stdout.write(`${JSON.stringify({ load: loadavg()[0], client: { created: median(client1.created), held: median(client1.held) }, firstDelta: { created: median(firstDelta.created), held: median(firstDelta.held) }, providerP50 })}\n`);
} finally {
  await tap.close().catch(() => undefined);
  await nc.close().catch(() => undefined);
  await Promise.all(processes.map((child) => child.stop()));
  await server.stop();
  await rm(work, { recursive: true, force: true });
}
