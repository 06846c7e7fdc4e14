import { nuid } from '@nats-io/nats-core';
import { connectBus } from '../../src/bus/connect.ts';
import { createProviderClient } from '../../src/bus/provider-client.ts';
import { createToolClient } from '../../src/bus/tool-client.ts';
import { createLogger } from '../../src/logging.ts';
import { createCodec, createSubjects } from '../../src/protocol/index.ts';
import { createScrubber } from '../../src/scrub/index.ts';
import { createTokenCounter } from '../../src/tokens.ts';
import { DEFAULT_RUNTIME_CONFIG, createNodeId, startRuntime } from '../../services/runtime/index.ts';
import type { RuntimeConfig } from '../../services/runtime/index.ts';

// The runtime alone in a process started with --expose-gc, wired as startRuntimeService wires it but with
// a config object the bench can change: it measures the heap on `bench.heap.measure` and passivates every
// idle session on `bench.heap.passivate` (its clock moved past idleMs, then it waits for the sweep).
const gc = (globalThis as { gc?: () => void }).gc;
if (!gc) throw new Error('start with --expose-gc');
const logger = createLogger({ name: 'bench-runtime', level: process.env.LOG_LEVEL ?? 'warn' });
const nc = await connectBus({ servers: process.env.NATS_URL ?? 'nats://127.0.0.1:4222', name: 'bench-runtime', logger });
const codec = createCodec();
const subjects = createSubjects('agentbus');
const config: { -readonly [K in keyof RuntimeConfig]: RuntimeConfig[K] } = {
  ...DEFAULT_RUNTIME_CONFIG,
  nodeId: createNodeId(),
  leaseTtlMs: 30_000,
  idleMs: 60 * 60_000,
  // The bench hydrates thousands of sessions a second from one tenant: admission is not what it measures.
  admission: { ...DEFAULT_RUNTIME_CONFIG.admission, sessionRate: { perSecond: 0, burst: 0 }, tenantRate: { perSecond: 0, burst: 0 } },
};
let skewMs = 0;
const runtime = await startRuntime({
  nc,
  codec,
  logger,
  config,
  provider: createProviderClient({ nc, subjects, codec, logger }),
  tools: createToolClient({ nc, subjects, codec, logger }),
  tokens: createTokenCounter(),
  scrubber: createScrubber(),
  newId: () => nuid.next(),
  // Passivation moves this clock past `idleMs`: the runtime copies `idleMs` from its config at start, so setting
  // the config's field afterwards (as this bench did) passivated nothing.
  now: () => Date.now() + skewMs,
});

async function settledHeap(): Promise<number> {
  // Let pending callbacks finish, then collect until the figure stops moving.
  await new Promise((resolve) => setTimeout(resolve, 200));
  let last = Number.POSITIVE_INFINITY;
  for (let i = 0; i < 6; i++) {
    gc!();
    await new Promise((resolve) => setImmediate(resolve));
    const used = process.memoryUsage().heapUsed;
    if (Math.abs(last - used) < 16 * 1024) return used;
    last = used;
  }
  return last;
}

nc.subscribe('bench.heap.measure', {
  callback: (error, message) => {
    if (error) return;
    void settledHeap().then((heapUsed) => message.respond(codec.encode({ heapUsed, sessions: runtime.sessions() })));
  },
});
nc.subscribe('bench.heap.passivate', {
  callback: (error, message) => {
    if (error) return;
    skewMs += config.idleMs + 1;
    const started = Date.now();
    const check = setInterval(() => {
      if (runtime.sessions() > 0 && Date.now() - started < 120_000) return;
      clearInterval(check);
      message.respond(codec.encode({ sessions: runtime.sessions(), ms: Date.now() - started }));
    }, 50);
  },
});
await nc.flush();
process.stdout.write('bench runtime ready\n');
process.on('SIGTERM', () => {
  void runtime
    .stop()
    .then(() => nc.close())
    .finally(() => process.exit(0));
});
