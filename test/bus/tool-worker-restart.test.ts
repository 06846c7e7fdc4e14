import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import type { NatsConnection } from '@nats-io/nats-core';
import { connect } from '@nats-io/transport-node';
import { z } from 'zod';
import { SafetyTier, createCodec, createSubjects } from '../../src/protocol/index.ts';
import type { AgentEvent } from '../../src/protocol/index.ts';
import { createToolWorker, defineTool } from '../../src/tool-sdk/index.ts';
import type { ToolWorker } from '../../src/tool-sdk/index.ts';
import { startProviderService } from '../../services/provider/index.ts';
import type { ProviderService } from '../../services/provider/index.ts';
import { DEFAULT_RUNTIME_CONFIG, runtimeConfigFromEnv, startRuntimeService } from '../../services/runtime/index.ts';
import type { Runtime } from '../../services/runtime/index.ts';
import { collectEvents, requestJson, silentLogger } from '../helpers/stack.ts';
import { startNatsServer } from '../helpers/nats-server.ts';
import type { TestNatsServer } from '../helpers/nats-server.ts';

// Tool workers that come and go: a call no worker is listening for (a worker killed and restarted, a rolling
// restart, `docker compose up` order) is waited for, with live `retry` events, instead of failing the turn. A tool
// no worker ever announced still fails at once. On a real nats-server with the runtime and the scripted provider.

const logger = silentLogger();
const codec = createCodec();
const subjects = createSubjects('agentbus');
const SCRIPT = {
  responses: [
    { toolCalls: [{ name: 'echo_back', args: { text: 'one' } }] },
    { text: 'first done' },
    { toolCalls: [{ name: 'echo_back', args: { text: 'two' } }] },
    { text: 'second done' },
    { toolCalls: [{ name: 'ghost_tool', args: {} }] },
    { text: 'no ghost here' },
  ],
};

let server: TestNatsServer;
let client: NatsConnection;
let provider: ProviderService;
let runtime: Runtime;
const connections: NatsConnection[] = [];

const echoBack = defineTool({
  name: 'echo_back',
  description: 'Echoes its text',
  parameters: z.object({ text: z.string() }),
  tier: SafetyTier.readOnly,
  timeoutMs: 5_000,
  idempotent: true,
  execute: ({ text }) => `echo: ${text}`,
});

async function startWorker(): Promise<{ worker: ToolWorker; nc: NatsConnection }> {
  const nc = await connect({ servers: server.url });
  connections.push(nc);
  const worker = createToolWorker({ nc, subjects, codec, logger, tools: [echoBack], version: '0.1.0', ledger: false });
  await worker.start();
  return { worker, nc };
}

beforeAll(async () => {
  server = await startNatsServer();
  client = await connect({ servers: server.url });
  const providerConnection = await connect({ servers: server.url });
  const runtimeConnection = await connect({ servers: server.url });
  connections.push(providerConnection, runtimeConnection);
  provider = await startProviderService({ nc: providerConnection, logger, script: SCRIPT });
  // The default wait (30 s): the test shows the turn does not need it all, and that an unknown tool waits for none of it.
  runtime = await startRuntimeService({ nc: runtimeConnection, logger, config: { leaseTtlMs: 3000 } });
});

afterAll(async () => {
  await runtime?.stop().catch(() => undefined);
  await provider?.stop().catch(() => undefined);
  for (const nc of [client, ...connections]) await nc?.close().catch(() => undefined);
  await server?.stop();
});

const turnsEnded = (events: AgentEvent[]) => events.filter((event) => event.type === 'turn.ended');
const results = (events: AgentEvent[]) => events.filter((event) => event.type === 'tool.result');

describe('a tool worker killed and restarted mid-session', () => {
  it('is waited for: the turn that asked for its tool while none listened completes, and each wait was a live retry event', async () => {
    const events = collectEvents(client, 'acme', 'restart-1');
    const first = await startWorker();
    await requestJson(client, 'agentbus.acme.sessions.restart-1.prompt', { text: 'echo one' });
    await events.until((seen) => turnsEnded(seen).length === 1);
    expect(results(events.events)[0]).toMatchObject({ data: { isError: false, output: 'echo: one' } });

    // Killed: its connection drops with no goodbye, as SIGKILL would leave it.
    await first.nc.close();
    const asked = Date.now();
    await requestJson(client, 'agentbus.acme.sessions.restart-1.prompt', { text: 'echo two' });
    // Its replacement comes up 1.5 s after the turn asked for the tool.
    await events.until((seen) => seen.some((event) => event.type === 'retry'));
    await new Promise((resolve) => setTimeout(resolve, Math.max(0, 1_500 - (Date.now() - asked))));
    const second = await startWorker();

    await events.until((seen) => turnsEnded(seen).length === 2, 20_000);
    expect(turnsEnded(events.events)[1]).toMatchObject({ data: { reason: 'yielded', text: 'second done' } });
    expect(results(events.events)[1]).toMatchObject({ data: { isError: false, output: 'echo: two' } });
    const retries = events.events.filter((event) => event.type === 'retry');
    expect(retries.length).toBeGreaterThanOrEqual(2);
    const toolCallId = results(events.events)[1]!.type === 'tool.result' ? (results(events.events)[1]!.data as { toolCallId: string }).toolCallId : '';
    expect(retries[0]).toMatchObject({
      data: { attempt: 2, maxAttempts: 20, delayMs: 100, error: { code: 'no_responders', retryable: true }, tool: 'echo_back', toolCallId },
    });
    expect(retries.map((event) => (event.data as { attempt: number }).attempt)).toEqual(retries.map((_, index) => index + 2));
    events.stop();
    await second.worker.stop();
  });

  it('is waited for when the step found no worker of it at all, the tool announced before (a read-only tool the model still calls)', async () => {
    // No worker runs now. The runtime's tool list (2 s TTL, refreshed in the background as the last turn ended) has
    // expired: this turn's discovery finds no echo_back, and the model is not offered it.
    await new Promise((resolve) => setTimeout(resolve, 3_000));
    const events = collectEvents(client, 'acme', 'restart-2');
    const asked = Date.now();
    await requestJson(client, 'agentbus.acme.sessions.restart-2.prompt', { text: 'echo one' });
    await events.until((seen) => seen.some((event) => event.type === 'retry'));
    await new Promise((resolve) => setTimeout(resolve, Math.max(0, 1_500 - (Date.now() - asked))));
    const { worker } = await startWorker();
    await events.until((seen) => turnsEnded(seen).length === 1, 20_000);
    expect(results(events.events)[0]).toMatchObject({ data: { isError: false, output: 'echo: one' } });
    expect(turnsEnded(events.events)[0]).toMatchObject({ data: { reason: 'yielded', text: 'first done' } });
    events.stop();
    await worker.stop();
  });

  it('still fails a tool no worker ever announced at once, without waiting', async () => {
    const events = collectEvents(client, 'acme', 'restart-1');
    const { worker } = await startWorker();
    const asked = Date.now();
    await requestJson(client, 'agentbus.acme.sessions.restart-1.prompt', { text: 'call a ghost' });
    await events.until((seen) => turnsEnded(seen).length === 1);
    expect(Date.now() - asked).toBeLessThan(5_000);
    const use = events.events.find((event) => event.type === 'tool.use')!;
    const result = events.events.find((event) => event.type === 'tool.result')!;
    expect(result).toMatchObject({ data: { name: 'ghost_tool', isError: true, error: { code: 'unknown_tool' } } });
    expect(result.ts - use.ts).toBeLessThan(1_000);
    expect(events.events.some((event) => event.type === 'retry')).toBe(false);
    expect(turnsEnded(events.events)[0]).toMatchObject({ data: { reason: 'yielded', text: 'no ghost here' } });
    events.stop();
    await worker.stop();
  });
});

describe('AGENTBUS_WAIT_FOR_SERVICE_MS', () => {
  it('sets how long a call nobody takes is waited for: 30 s by default, a positive whole number of milliseconds', () => {
    expect(DEFAULT_RUNTIME_CONFIG.waitForServiceMs).toBe(30_000);
    expect(runtimeConfigFromEnv({ AGENTBUS_WAIT_FOR_SERVICE_MS: '5000' })).toMatchObject({ waitForServiceMs: 5_000 });
    expect(() => runtimeConfigFromEnv({ AGENTBUS_WAIT_FOR_SERVICE_MS: 'soon' })).toThrow(/AGENTBUS_WAIT_FOR_SERVICE_MS must be a positive integer/);
  });
});
