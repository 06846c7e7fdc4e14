import { beforeAll, describe, expect, it } from 'vitest';
import { setTimeout as sleep } from 'node:timers/promises';
import type { NatsConnection } from '@nats-io/nats-core';
import { connect } from '@nats-io/transport-node';
import { Kvm } from '@nats-io/kv';
import { pino } from 'pino';
import { z } from 'zod';
import { AgentbusError } from '../../src/errors.ts';
import { SafetyTier, ToolCallHeader, createCodec, createSubjects, streamNames } from '../../src/protocol/index.ts';
import type { ToolCallEvent, ToolCallRequest } from '../../src/protocol/index.ts';
import { createToolClient } from '../../src/bus/tool-client.ts';
import { createReplyMux } from '../../src/bus/reply-mux.ts';
import { createToolWorker, defineTool } from '../../src/tool-sdk/index.ts';
import { ledgerKey } from '../../src/tool-sdk/result-ledger.ts';
import type { AnyToolDefinition, ToolWorker, ToolWorkerOptions } from '../../src/tool-sdk/index.ts';
import { useNatsServer } from '../helpers/nats-fixture.ts';

// Worker heartbeats, progress and the result ledger, between the tool SDK's worker and the runtime's tool
// client, on a real nats-server.

const nats = useNatsServer();
const logger = pino({ level: 'silent' });
const codec = createCodec();
const prefix = 'live';
const subjects = createSubjects(prefix);
let sequence = 0;

beforeAll(async () => {
  // The runtime makes the ledger bucket at start; here the test does.
  await new Kvm(nats.nc).create(streamNames(prefix).ledger, { history: 1 });
});

function request(name: string, args: unknown, options: { effectId?: string; deadlineMs?: number } = {}): ToolCallRequest {
  sequence += 1;
  return {
    v: 1,
    callId: `call-${sequence}`,
    effectId: options.effectId ?? `effect-${sequence}`,
    name,
    args,
    tenant: 'acme',
    sessionId: 's1',
    turnId: 't1',
    deadline: Date.now() + (options.deadlineMs ?? 10_000),
  };
}

/** A worker on a connection of its own, so a test can cut it off as a crash would. */
async function startWorker(tools: AnyToolDefinition[], extra: Partial<ToolWorkerOptions> = {}): Promise<{ worker: ToolWorker; nc: NatsConnection }> {
  const nc = await connect({ servers: nats.server.url });
  const worker = createToolWorker({ nc, subjects, codec, logger, tools, version: '0.1.0', stopGraceMs: 100, heartbeatMs: 200, ...extra });
  await worker.start();
  return { worker, nc };
}

async function stopWorker(started: { worker: ToolWorker; nc: NatsConnection }): Promise<void> {
  await started.worker.stop().catch(() => undefined);
  await started.nc.close().catch(() => undefined);
}

const client = (lapseMs = 800) => createToolClient({ nc: nats.nc, subjects, codec, logger, discoveryTtlMs: 60_000, heartbeatLapseMs: lapseMs });

function sleepingTool(name: string, ms: number, extra: { tier?: SafetyTier; onStart?: () => void; progress?: boolean } = {}): AnyToolDefinition {
  return defineTool({
    name,
    description: `Sleeps ${ms} ms`,
    parameters: z.object({}),
    tier: extra.tier ?? SafetyTier.readOnly,
    timeoutMs: 20_000,
    idempotent: true,
    async execute(_args, { signal, progress }) {
      extra.onStart?.();
      const steps = 4;
      for (let step = 1; step <= steps; step++) {
        await sleep(ms / steps, undefined, { signal });
        if (extra.progress) progress({ message: `step ${step} of ${steps}`, progress: step, total: steps });
      }
      return `slept ${ms} ms`;
    },
  });
}

describe('heartbeats', () => {
  it('keeps a call that runs far past the lapse alive while its worker beats', async () => {
    const started = await startWorker([sleepingTool('long_nap', 2_000)]);
    try {
      const tools = client(600);
      await tools.listTools({});
      const reply = await tools.call(request('long_nap', {}), { timeoutMs: 10_000 });
      expect(reply).toMatchObject({ ok: true, output: 'slept 2000 ms' });
    } finally {
      await stopWorker(started);
    }
  });

  it('beats for calls waiting for a slot too, so a busy worker is not taken for a dead one', async () => {
    const started = await startWorker([sleepingTool('queued_nap', 900)], { maxConcurrency: 1 });
    try {
      const tools = client(600);
      await tools.listTools({});
      const replies = await Promise.all([1, 2, 3].map(() => tools.call(request('queued_nap', {}), { timeoutMs: 10_000 })));
      expect(replies.map((reply) => reply.ok)).toEqual([true, true, true]);
    } finally {
      await stopWorker(started);
    }
  });

  it('does not take a worker for dead while it was this process that stalled past the lapse', async () => {
    const started = await startWorker([sleepingTool('stalled_nap', 1_600)]);
    try {
      const tools = client(600);
      await tools.listTools({});
      // Hold this event loop for twice the lapse while the call runs: the worker beats on, but its heartbeats
      // wait in the socket until the loop is free again, after the lapse timer is due.
      setTimeout(() => {
        const until = Date.now() + 1_200;
        while (Date.now() < until);
      }, 300);
      const reply = await tools.call(request('stalled_nap', {}), { timeoutMs: 10_000 });
      expect(reply).toMatchObject({ ok: true, output: 'slept 1600 ms' });
    } finally {
      await stopWorker(started);
    }
  });

  it('gives up on a call whose worker dies mid-call within the lapse, as worker_lost, and cancels it', async () => {
    let running = () => {};
    const isRunning = new Promise<void>((resolve) => (running = resolve));
    const started = await startWorker([sleepingTool('doomed_nap', 8_000, { onStart: () => running() })]);
    const cancels: string[] = [];
    const watcher = nats.nc.subscribe(subjects.toolCancel('doomed_nap'), {
      callback: (_error, message) => {
        cancels.push((codec.decode(message.data) as { id: string }).id);
      },
    });
    try {
      const tools = client(800);
      await tools.listTools({});
      const call = request('doomed_nap', {});
      const pending = tools.call(call, { timeoutMs: 20_000 });
      await isRunning;
      const killedAt = Date.now();
      // As a SIGKILL looks to the server: the connection is gone, and no heartbeat comes again.
      await started.nc.close();
      const reply = await pending;
      const waited = Date.now() - killedAt;
      expect(reply).toMatchObject({ ok: false, error: { code: 'worker_lost', retryable: true } });
      expect(waited).toBeLessThan(5_000);
      expect(waited).toBeGreaterThanOrEqual(500);
      await expect.poll(() => cancels).toContain(call.callId);
    } finally {
      watcher.unsubscribe();
      await started.worker.stop().catch(() => undefined);
    }
  });

  it('waits the whole timeout for a worker that announces no heartbeats (another language, an older SDK)', async () => {
    const name = 'plain_responder';
    const responder = nats.nc.subscribe(subjects.toolCall(name), {
      callback: (_error, message) => {
        const call = codec.decode(message.data) as ToolCallRequest;
        setTimeout(() => message.respond(codec.encode({ v: 1, callId: call.callId, ok: true, output: 'late but fine' })), 1_200);
      },
    });
    try {
      const reply = await client(300).call(request(name, {}), { timeoutMs: 5_000 });
      expect(reply).toMatchObject({ ok: true, output: 'late but fine' });
    } finally {
      responder.unsubscribe();
    }
  });

  it('sends nothing but the reply to a caller that did not ask for heartbeats', async () => {
    const started = await startWorker([sleepingTool('quiet_nap', 700, { progress: true })]);
    try {
      // A plain request, as `nats req` or another language's client sends it: one message back, the reply.
      const replies = createReplyMux(nats.nc);
      const received: Array<{ event?: string; body: unknown }> = [];
      const route = replies.route((message) => received.push({ event: message.headers?.get(ToolCallHeader.event) || undefined, body: codec.decode(message.data) }));
      nats.nc.publish(subjects.toolCall('quiet_nap'), codec.encode(request('quiet_nap', {})), { reply: route.subject });
      await expect.poll(() => received.length, { timeout: 5_000 }).toBe(1);
      await sleep(300);
      expect(received).toEqual([{ event: undefined, body: expect.objectContaining({ ok: true, output: 'slept 700 ms' }) }]);
      route.close();
    } finally {
      await stopWorker(started);
    }
  });
});

describe('a schema that throws', () => {
  it('answers invalid_arguments, and the worker goes on serving', async () => {
    const parsing = defineTool({
      name: 'parse_json',
      description: 'Parses a JSON text',
      parameters: z.object({ text: z.string().transform((text) => JSON.parse(text) as unknown) }),
      tier: SafetyTier.readOnly,
      timeoutMs: 5_000,
      idempotent: true,
      execute: ({ text }) => text,
    });
    const started = await startWorker([parsing]);
    try {
      const tools = client();
      expect(await tools.call(request('parse_json', { text: '{bad' }), { timeoutMs: 5_000 })).toMatchObject({ ok: false, error: { code: 'invalid_arguments' } });
      expect(await tools.call(request('parse_json', { text: '{"ok":true}' }), { timeoutMs: 5_000 })).toMatchObject({ ok: true, output: { ok: true } });
    } finally {
      await stopWorker(started);
    }
  });
});

describe('progress', () => {
  it("carries a tool's progress reports to the caller, in order", async () => {
    const started = await startWorker([sleepingTool('counting_nap', 800, { progress: true })]);
    try {
      const events: ToolCallEvent[] = [];
      const reply = await client().call(request('counting_nap', {}), { timeoutMs: 10_000, onProgress: (event) => events.push(event) });
      expect(reply.ok).toBe(true);
      expect(events.map((event) => event.progress)).toEqual([1, 2, 3, 4]);
      expect(events[0]).toMatchObject({ kind: 'progress', message: 'step 1 of 4', total: 4 });
    } finally {
      await stopWorker(started);
    }
  });
});

describe('result ledger', () => {
  /** A side-effecting tool that counts its runs per effectId. */
  function countingTool(name: string, runs: Map<string, number>, options: { idempotent?: boolean; fail?: boolean } = {}): AnyToolDefinition {
    return defineTool({
      name,
      description: 'Applies an effect and counts it',
      parameters: z.object({ amount: z.number() }),
      tier: SafetyTier.sideEffecting,
      timeoutMs: 5_000,
      idempotent: options.idempotent ?? false,
      execute({ amount }, { effectId }) {
        runs.set(effectId, (runs.get(effectId) ?? 0) + 1);
        if (options.fail) throw new AgentbusError('payment_declined', `declined ${amount}`);
        return { charged: amount, run: runs.get(effectId) };
      },
    });
  }

  it('answers a repeat of a recorded call from the record, without running the tool again', async () => {
    const runs = new Map<string, number>();
    const started = await startWorker([countingTool('charge', runs)]);
    try {
      const tools = client();
      const first = request('charge', { amount: 5 }, { effectId: 'acme-order-1' });
      expect(await tools.call(first, { timeoutMs: 5_000 })).toMatchObject({ ok: true, output: { charged: 5, run: 1 } });
      // A resumed turn or a retry: the same effectId under a new call id, marked as a repeat.
      const again = { ...request('charge', { amount: 5 }, { effectId: 'acme-order-1' }) };
      // The record keeps the output as the model sees it: text, scrubbed.
      expect(await tools.call(again, { timeoutMs: 5_000, attempt: 2 })).toEqual({ v: 1, callId: again.callId, ok: true, output: '{"charged":5,"run":1}' });
      expect(runs.get('acme-order-1')).toBe(1);
    } finally {
      await stopWorker(started);
    }
  });

  it('keeps no secret: what it records is scrubbed', async () => {
    const leaky = defineTool({
      name: 'leaky_deploy',
      description: 'Deploys, and prints a token it should not',
      parameters: z.object({}),
      tier: SafetyTier.sideEffecting,
      timeoutMs: 5_000,
      idempotent: false,
      execute: () => 'deployed with ghp_0123456789abcdefghijklmnopqrstuvwxyzAB',
    });
    const started = await startWorker([leaky]);
    try {
      const tools = client();
      await tools.call(request('leaky_deploy', {}, { effectId: 'leaky-1' }), { timeoutMs: 5_000 });
      const stored = await new Kvm(nats.nc).open(streamNames(prefix).ledger).then((kv) => kv.get(ledgerKey({ tenant: 'acme', sessionId: 's1' }, 'leaky-1')));
      const entry = codec.decode(stored!.value) as { reply: { output: string } };
      expect(entry.reply.output).toMatch(/^deployed with \[REDACTED:/);
      expect(entry.reply.output).not.toContain('ghp_');
    } finally {
      await stopWorker(started);
    }
  });

  it('still answers a call that ran when its outcome cannot be kept (a scrubber that fails): the reply wins over the record', async () => {
    const runs = new Map<string, number>();
    const failing = { scrub: async () => Promise.reject(new Error('scrubber down')), scrubSync: (text: string) => text };
    const started = await startWorker([countingTool('charge_unkept', runs)], { scrubber: failing });
    try {
      const tools = client();
      expect(await tools.call(request('charge_unkept', { amount: 3 }, { effectId: 'acme-order-3' }), { timeoutMs: 5_000 })).toMatchObject({ ok: true, output: { charged: 3, run: 1 } });
      // Nothing was recorded: a repeat of this non-idempotent call is not run again.
      expect(await tools.call(request('charge_unkept', { amount: 3 }, { effectId: 'acme-order-3' }), { timeoutMs: 5_000, attempt: 2 })).toMatchObject({ ok: false, error: { code: 'interrupted' } });
      expect(runs.get('acme-order-3')).toBe(1);
    } finally {
      await stopWorker(started);
    }
  });

  it('keeps a failure as it keeps a success: a repeat gets the same error', async () => {
    const runs = new Map<string, number>();
    const started = await startWorker([countingTool('declining_charge', runs, { fail: true })]);
    try {
      const tools = client();
      const first = await tools.call(request('declining_charge', { amount: 7 }, { effectId: 'acme-order-2' }), { timeoutMs: 5_000 });
      expect(first).toMatchObject({ ok: false, error: { code: 'payment_declined' } });
      const again = await tools.call(request('declining_charge', { amount: 7 }, { effectId: 'acme-order-2' }), { timeoutMs: 5_000, attempt: 2 });
      expect(again).toMatchObject({ ok: false, error: { code: 'payment_declined', message: 'declined 7' } });
      expect(runs.get('acme-order-2')).toBe(1);
    } finally {
      await stopWorker(started);
    }
  });

  it('ends a repeat with no record interrupted for a tool that is not idempotent, and runs it for one that is', async () => {
    const runs = new Map<string, number>();
    const started = await startWorker([countingTool('once_only', runs), countingTool('safe_twice', runs, { idempotent: true })]);
    try {
      const tools = client();
      const unrecorded = await tools.call(request('once_only', { amount: 1 }, { effectId: 'never-recorded' }), { timeoutMs: 5_000, attempt: 2 });
      expect(unrecorded).toMatchObject({ ok: false, error: { code: 'interrupted', retryable: false } });
      expect(runs.has('never-recorded')).toBe(false);
      const idempotent = await tools.call(request('safe_twice', { amount: 1 }, { effectId: 'idempotent-1' }), { timeoutMs: 5_000, attempt: 2 });
      expect(idempotent).toMatchObject({ ok: true, output: { run: 1 } });
    } finally {
      await stopWorker(started);
    }
  });

  it('records nothing for a call that never ran (bad arguments), so a corrected repeat runs', async () => {
    const runs = new Map<string, number>();
    const started = await startWorker([countingTool('strict_charge', runs, { idempotent: true })]);
    try {
      const tools = client();
      const bad = await tools.call(request('strict_charge', { amount: 'five' }, { effectId: 'fixed-later' }), { timeoutMs: 5_000 });
      expect(bad).toMatchObject({ ok: false, error: { code: 'invalid_arguments' } });
      const fixed = await tools.call(request('strict_charge', { amount: 5 }, { effectId: 'fixed-later' }), { timeoutMs: 5_000, attempt: 2 });
      expect(fixed).toMatchObject({ ok: true, output: { charged: 5, run: 1 } });
    } finally {
      await stopWorker(started);
    }
  });

  it('announces the ledger for side-effecting tools only, and not at all when it is off', async () => {
    const runs = new Map<string, number>();
    const withLedger = await startWorker([countingTool('ledgered_charge', runs), sleepingTool('read_only_nap', 10)]);
    const without = await startWorker([countingTool('unledgered_charge', runs)], { ledger: false });
    try {
      const listed = await client().listTools({});
      const byName = new Map(listed.map((tool) => [tool.name, tool]));
      expect(byName.get('ledgered_charge')).toMatchObject({ ledger: true, heartbeatMs: 200 });
      expect(byName.get('read_only_nap')).toMatchObject({ ledger: false });
      expect(byName.get('unledgered_charge')).toMatchObject({ ledger: false });
    } finally {
      await stopWorker(withLedger);
      await stopWorker(without);
    }
  });

  it('refuses a repeat of a non-idempotent call on a worker that keeps no ledger: it cannot know the first did not run', async () => {
    const runs = new Map<string, number>();
    const started = await startWorker([countingTool('unrecorded_charge', runs)], { ledger: false });
    try {
      const tools = client();
      const repeat = await tools.call(request('unrecorded_charge', { amount: 2 }, { effectId: 'no-ledger-1' }), { timeoutMs: 5_000, attempt: 2 });
      expect(repeat).toMatchObject({ ok: false, error: { code: 'interrupted', retryable: false } });
      expect(runs.size).toBe(0);
    } finally {
      await stopWorker(started);
    }
  });

  it('still answers when the ledger bucket does not exist (the call runs; the record is lost and logged)', async () => {
    const runs = new Map<string, number>();
    const other = createSubjects('noledger');
    const nc = await connect({ servers: nats.server.url });
    const worker = createToolWorker({ nc, subjects: other, codec, logger, tools: [countingTool('orphan_charge', runs)], version: '0.1.0', stopGraceMs: 100 });
    await worker.start();
    try {
      const tools = createToolClient({ nc: nats.nc, subjects: other, codec, logger });
      expect(await tools.call(request('orphan_charge', { amount: 3 }), { timeoutMs: 8_000 })).toMatchObject({ ok: true, output: { charged: 3 } });
    } finally {
      await worker.stop();
      await nc.close();
    }
  });
});
