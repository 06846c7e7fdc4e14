import { setTimeout as sleep } from 'node:timers/promises';
import { z } from 'zod';
import { connectBus, drainOnSignals } from '../../src/bus/connect.ts';
import { createLogger } from '../../src/logging.ts';
import { SafetyTier, createCodec, createSubjects, prefixFromEnv } from '../../src/protocol/index.ts';
import { createToolWorker, defineTool } from '../../src/tool-sdk/index.ts';
import { RECORDED_TOOL_NAME, TOOL_NAME, lookup } from './workload.ts';

// A bench tool worker as its own process: serves `bench_lookup` (read-only; answers at once, or after
// BENCH_TOOL_DELAY_MS) and `bench_record` (side-effecting: its outcome goes to the result ledger before the
// reply) with BENCH_TOOL_CONCURRENCY slots, and a raw NATS echo responder on `bench.echo` in the same
// process, so the tool round trips and the raw request/reply cross the same hops.
const logger = createLogger({ name: 'bench-tools', level: process.env.LOG_LEVEL ?? 'warn' });
const nc = await connectBus({ servers: process.env.NATS_URL ?? 'nats://127.0.0.1:4222', name: 'bench-tools', logger });
const delayMs = Number(process.env.BENCH_TOOL_DELAY_MS ?? '0');
const maxConcurrency = Number(process.env.BENCH_TOOL_CONCURRENCY ?? '64');

const benchLookup = defineTool({
  name: TOOL_NAME,
  description: 'Looks up the value of a key.',
  parameters: z.object({ key: z.string() }),
  tier: SafetyTier.readOnly,
  timeoutMs: 10_000,
  idempotent: true,
  async execute({ key }, { signal }) {
    if (delayMs > 0) await sleep(delayMs, undefined, { signal });
    return lookup(key);
  },
});

const benchRecord = defineTool({
  name: RECORDED_TOOL_NAME,
  description: 'Records the value of a key (a side effect).',
  parameters: z.object({ key: z.string() }),
  tier: SafetyTier.sideEffecting,
  timeoutMs: 10_000,
  idempotent: false,
  execute: ({ key }) => lookup(key),
});

const worker = createToolWorker({
  nc,
  subjects: createSubjects(prefixFromEnv(process.env)),
  codec: createCodec(),
  logger,
  tools: [benchLookup, benchRecord],
  version: '0.1.0',
  description: 'agentbus bench tools',
  maxConcurrency,
});
await worker.start();
nc.subscribe('bench.echo', {
  callback: (error, message) => {
    if (!error) message.respond(message.data);
  },
});
await nc.flush();
drainOnSignals(nc, logger, () => worker.stop());
process.stdout.write('bench tool worker ready\n');
