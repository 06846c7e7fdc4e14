import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import type { NatsConnection } from '@nats-io/nats-core';
import { connect } from '@nats-io/transport-node';
import { z } from 'zod';
import { SafetyTier, createCodec, createSubjects } from '../../src/protocol/index.ts';
import type { AgentEvent } from '../../src/protocol/index.ts';
import { createToolWorker, defineTool } from '../../src/tool-sdk/index.ts';
import type { ToolWorker } from '../../src/tool-sdk/index.ts';
import { createScriptedAdapter, startProviderService } from '../../services/provider/index.ts';
import type { ProviderService } from '../../services/provider/index.ts';
import { startRuntimeService } from '../../services/runtime/index.ts';
import type { Runtime } from '../../services/runtime/index.ts';
import { collectEvents, requestJson, silentLogger } from '../helpers/stack.ts';
import { startNatsServer } from '../helpers/nats-server.ts';
import type { TestNatsServer } from '../helpers/nats-server.ts';

// Many OpenAI-compatible servers give every tool call the same id (`call_0`). The id a worker holds, cancels and
// remembers a call by is the runtime's, minted per attempt: a cancel in one session never reaches another
// session's call, and a cancel a worker remembered for a call it did not hold refuses no other session's call.
// On a real nats-server, with the runtime, the scripted provider (every call `call_0`) and real tool workers.

const logger = silentLogger();
const codec = createCodec();
const subjects = createSubjects('agentbus');
const SCRIPT = { responses: [{ toolCalls: [{ name: 'slow_lookup', args: {} }] }, { text: 'looked it up' }] };

let server: TestNatsServer;
let client: NatsConnection;
let provider: ProviderService;
let runtime: Runtime;
let stamper: ToolWorker | undefined;
const connections: NatsConnection[] = [];
/** Each run of the tool, by `<tenant>/<session>`: resolves when it starts. */
const started = new Map<string, () => void>();
const startedPromises = new Map<string, Promise<void>>();

function whenStarted(key: string): Promise<void> {
  let promise = startedPromises.get(key);
  if (!promise) {
    promise = new Promise<void>((resolve) => started.set(key, resolve));
    startedPromises.set(key, promise);
  }
  return promise;
}

const slowLookup = defineTool({
  name: 'slow_lookup',
  description: 'Looks something up, slowly (1.5 s)',
  parameters: z.object({}),
  tier: SafetyTier.readOnly,
  timeoutMs: 20_000,
  idempotent: true,
  execute: (_args, { tenant, sessionId, signal }) => {
    const key = `${tenant}/${sessionId}`;
    void whenStarted(key);
    started.get(key)!();
    return new Promise((resolve, reject) => {
      const timer = setTimeout(() => resolve(`looked up for ${key}`), 1_500);
      signal.addEventListener('abort', () => (clearTimeout(timer), reject(signal.reason)), { once: true });
    });
  },
});

/** A side-effecting tool whose outcomes the result ledger keeps, by effectId. */
const quickStamp = defineTool({
  name: 'quick_stamp',
  description: 'Stamps once per effect',
  parameters: z.object({}),
  tier: SafetyTier.sideEffecting,
  timeoutMs: 5_000,
  idempotent: false,
  execute: (_args, { effectId }) => `stamped ${effectId}`,
});

async function startWorker(): Promise<{ worker: ToolWorker; nc: NatsConnection }> {
  const nc = await connect({ servers: server.url });
  connections.push(nc);
  const worker = createToolWorker({ nc, subjects, codec, logger, tools: [slowLookup], version: '0.1.0', ledger: false, stopGraceMs: 100 });
  await worker.start();
  return { worker, nc };
}

beforeAll(async () => {
  server = await startNatsServer();
  client = await connect({ servers: server.url });
  const providerConnection = await connect({ servers: server.url });
  const runtimeConnection = await connect({ servers: server.url });
  connections.push(providerConnection, runtimeConnection);
  // Every tool call of every session is `call_0`, as some servers do.
  // A second one (`twostep:`) asks for a tool at two steps of one turn, call_0 both times.
  const twoSteps = { responses: [{ toolCalls: [{ name: 'quick_stamp', args: {} }] }, { toolCalls: [{ name: 'quick_stamp', args: {} }] }, { text: 'stamped twice' }] };
  provider = await startProviderService({
    nc: providerConnection,
    logger,
    adapters: [
      createScriptedAdapter({ script: SCRIPT, toolCallId: () => 'call_0' }),
      { ...createScriptedAdapter({ script: twoSteps, toolCallId: () => 'call_0' }), name: 'twostep' },
    ],
  });
  // Up before the runtime's first discovery, and all along: its results go to the ledger.
  const stampConnection = await connect({ servers: server.url });
  connections.push(stampConnection);
  stamper = createToolWorker({ nc: stampConnection, subjects, codec, logger, tools: [quickStamp], version: '0.1.0', serviceName: 'stamp-tools' });
  await stamper.start();
  runtime = await startRuntimeService({ nc: runtimeConnection, logger, config: { leaseTtlMs: 3000 } });
});

afterAll(async () => {
  await runtime?.stop().catch(() => undefined);
  await provider?.stop().catch(() => undefined);
  await stamper?.stop().catch(() => undefined);
  for (const nc of [client, ...connections]) await nc?.close().catch(() => undefined);
  await server?.stop();
});

const ended = (events: AgentEvent[]) => events.find((event) => event.type === 'turn.ended');
const toolResult = (events: AgentEvent[]) => events.find((event) => event.type === 'tool.result');

describe('two sessions whose model reuses one tool-call id (call_0)', () => {
  it('cancel in session A ends only A\'s call: B\'s call completes with its output', async () => {
    const { worker } = await startWorker();
    const a = collectEvents(client, 'acme', 'reuse-a');
    const b = collectEvents(client, 'globex', 'reuse-b');
    await requestJson(client, 'agentbus.acme.sessions.reuse-a.prompt', { text: 'look it up' });
    await whenStarted('acme/reuse-a');
    await requestJson(client, 'agentbus.globex.sessions.reuse-b.prompt', { text: 'look it up' });
    await whenStarted('globex/reuse-b');
    // Both calls run on the one worker, both named call_0 by the model; A is cancelled while B runs.
    expect(await requestJson(client, 'agentbus.acme.sessions.reuse-a.cancel', {})).toMatchObject({ ok: true });

    await a.until((events) => ended(events) !== undefined);
    expect(ended(a.events)).toMatchObject({ data: { reason: 'cancelled' } });
    expect(toolResult(a.events)).toMatchObject({ data: { toolCallId: 'call_0', isError: true, error: { code: 'cancelled' } } });

    await b.until((events) => ended(events) !== undefined, 15_000);
    expect(toolResult(b.events)).toMatchObject({ data: { toolCallId: 'call_0', isError: false, output: 'looked up for globex/reuse-b' } });
    expect(ended(b.events)).toMatchObject({ data: { reason: 'yielded', text: 'looked it up' } });
    // The model's id stays in the log as the model gave it.
    expect(b.events.find((event) => event.type === 'tool.use')).toMatchObject({ data: { toolCallId: 'call_0', name: 'slow_lookup' } });
    a.stop();
    b.stop();
    await worker.stop();
  });

  it('a cancel a worker remembered for a call it did not hold refuses no later call of another session', async () => {
    const first = await startWorker();
    const c = collectEvents(client, 'acme', 'reuse-c');
    await requestJson(client, 'agentbus.acme.sessions.reuse-c.prompt', { text: 'look it up' });
    await whenStarted('acme/reuse-c');
    // A second worker joins; it does not hold C's call, so it remembers C's cancel (the call could be in its buffer).
    const second = await startWorker();
    expect(await requestJson(client, 'agentbus.acme.sessions.reuse-c.cancel', {})).toMatchObject({ ok: true });
    await c.until((events) => ended(events) !== undefined);
    expect(ended(c.events)).toMatchObject({ data: { reason: 'cancelled' } });
    // Only the second worker is left: the next session's call_0 goes to it.
    await first.worker.stop();
    const d = collectEvents(client, 'globex', 'reuse-d');
    await requestJson(client, 'agentbus.globex.sessions.reuse-d.prompt', { text: 'look it up' });
    await d.until((events) => ended(events) !== undefined, 15_000);
    expect(toolResult(d.events)).toMatchObject({ data: { toolCallId: 'call_0', isError: false, output: 'looked up for globex/reuse-d' } });
    expect(ended(d.events)).toMatchObject({ data: { reason: 'yielded' } });
    c.stop();
    d.stop();
    await second.worker.stop();
  });
});

describe('a model that reuses one tool-call id at two steps of a turn', () => {
  it('gives each step\'s call an effectId of its own, so that a repeat of one is never answered with the other\'s recorded outcome', async () => {
    const events = collectEvents(client, 'acme', 'two-steps');
    await requestJson(client, 'agentbus.acme.sessions.two-steps.prompt', { text: 'stamp it twice', model: 'twostep:default' });
    await events.until((seen) => ended(seen) !== undefined, 15_000);
    expect(ended(events.events)).toMatchObject({ data: { reason: 'yielded', text: 'stamped twice' } });
    const uses = events.events.filter((event) => event.type === 'tool.use').map((event) => event.data as { toolCallId: string; effectId: string });
    expect(uses.map((use) => use.toolCallId)).toEqual(['call_0', 'call_0']);
    expect(new Set(uses.map((use) => use.effectId)).size).toBe(2);
    const outputs = events.events.filter((event) => event.type === 'tool.result').map((event) => (event.data as { output: string }).output);
    expect(outputs).toEqual(uses.map((use) => `stamped ${use.effectId}`));
    events.stop();
  });
});
