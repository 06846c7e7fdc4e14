import { appendFileSync } from 'node:fs';
import { setTimeout as sleep } from 'node:timers/promises';
import { z } from 'zod';
import { connectBus } from '../../src/bus/connect.ts';
import { createLogger } from '../../src/logging.ts';
import { createCodec, createSubjects } from '../../src/protocol/index.ts';
import { createToolWorker, defineTool } from '../../src/tool-sdk/index.ts';

// A tool worker process for the fault suite: serves `effect`, a side effect that is not idempotent. Each run
// appends `<pid> <effectId>` to EFFECTS_FILE before it takes EFFECT_MS, so the suite can kill a worker in the
// middle of a call it knows about, and count afterwards how often each effectId ran.
// Env: NATS_URL, EFFECTS_FILE, EFFECT_MS (default 800), EFFECT_TIMEOUT_MS (default 2500).

const file = process.env.EFFECTS_FILE;
if (!file) throw new Error('EFFECTS_FILE is required');
const effectMs = Number(process.env.EFFECT_MS ?? 800);
const logger = createLogger({ name: 'effect-worker', level: process.env.LOG_LEVEL ?? 'info' });
const nc = await connectBus({ servers: process.env.NATS_URL ?? 'nats://127.0.0.1:4222', name: 'effect-worker', logger });
const effect = defineTool({
  name: 'effect',
  description: 'applies a side effect once',
  parameters: z.object({}),
  tier: 'side_effecting',
  idempotent: false,
  timeoutMs: Number(process.env.EFFECT_TIMEOUT_MS ?? 2500),
  execute: async (_args, { effectId, signal }) => {
    appendFileSync(file, `${process.pid} ${effectId}\n`);
    await sleep(effectMs, undefined, { signal });
    return 'effect applied';
  },
});
const worker = createToolWorker({ nc, subjects: createSubjects('agentbus'), codec: createCodec(), logger, tools: [effect], version: '0.1.0' });
await worker.start();
logger.info('effect worker started');
