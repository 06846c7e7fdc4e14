import { createWriteStream } from 'node:fs';
import { mkdtemp, rm, writeFile } from 'node:fs/promises';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { connect } from '@nats-io/transport-node';
import { startServiceProcess } from '../../test/helpers/service-process.ts';
import type { ServiceProcess } from '../../test/helpers/service-process.ts';
import { createAgentbusClient } from './agentbus-client.ts';
import { startNatsServer } from './nats-server.ts';
import { measureScaleOut } from './scale-out.ts';
import { providerScript } from './workload.ts';

// Only the bench's scale-out part (bench/lib/scale-out.ts), for measuring the runtime's ingress without the whole
// bench: `node --import tsx bench/lib/scale-out-main.ts [--ms=4000] [--modes=broadcast,queue] [--nodes=1,3,4] [--warm-ms=9000]
// [--idle-ms=3000] [--concurrency=200] [--in-flight=0] [--node-flags=a,b] [--node-output=DIR]`. Prints the rows as JSON on stdout; the in-flight part runs with
// 200 sessions (`--in-flight=0` skips it); `--node-flags` are passed to the runtime nodes (e.g. `--cpu-prof`).
const arg = (name: string) => process.argv.find((value) => value.startsWith(`--${name}=`))?.slice(name.length + 3);
const durationMs = Number(arg('ms') ?? 4_000);
const began = performance.now();
const log = (text: string) => process.stderr.write(`[${((performance.now() - began) / 1000).toFixed(1)}s] ${text}\n`);
const work = await mkdtemp(join(tmpdir(), 'agentbus-scale-out-'));
const server = await startNatsServer();
const processes: ServiceProcess[] = [];
const nc = await connect({ servers: server.url, name: 'scale-out-driver' });
try {
  const scriptPath = join(work, 'script.json');
  await writeFile(scriptPath, JSON.stringify(providerScript()));
  const slowScriptPath = join(work, 'slow.json');
  await writeFile(slowScriptPath, JSON.stringify({ responses: [{ text: 'ok ok', chunkSize: 3, delayMs: 1000 }] }));
  const client = await createAgentbusClient(nc, { watchDeltas: true });
  const figure = await measureScaleOut({
    nc,
    monitorUrl: server.monitorUrl,
    ...(arg('modes') ? { ingressModes: arg('modes')!.split(',') } : {}),
    ...(arg('nodes') ? { nodeCounts: arg('nodes')!.split(',').map(Number) } : {}),
    start: (entry, extra = {}) => {
      const flags = entry === 'services/runtime/main.ts' && arg('node-flags') ? arg('node-flags')!.split(',') : [];
      const started = startServiceProcess(entry, { NATS_URL: server.url, LOG_LEVEL: 'info', ...extra }, flags);
      processes.push(started);
      // --node-output=DIR: each runtime node's stdout (e.g. `--node-flags=--trace-opt`) to DIR/<pid>.log.
      if (flags.length > 0 && arg('node-output')) started.child.stdout?.pipe(createWriteStream(join(arg('node-output')!, `${started.child.pid}.log`)));
      return started;
    },
    session: async (sessionId, options) => void (await client.runTurn(sessionId, options)),
    scriptPath,
    slowScriptPath,
    durationMs,
    ...(arg('warm-ms') ? { warmMsPerNode: Number(arg('warm-ms')) } : {}),
    ...(arg('concurrency') ? { concurrency: Number(arg('concurrency')) } : {}),
    ...(arg('idle-ms') ? { idleMs: Number(arg('idle-ms')) } : {}),
    inFlightSessions: arg('in-flight') === '0' ? [] : [200],
    providerLatencyMs: 1000,
    log,
  });
  client.close();
  process.stdout.write(`${JSON.stringify(figure.nodes, null, 2)}\n`);
} finally {
  await nc.close().catch(() => undefined);
  await Promise.all(processes.map((child) => child.stop()));
  await server.stop();
  await rm(work, { recursive: true, force: true });
}
