import { mkdtemp, rm } from 'node:fs/promises';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import type { NatsConnection } from '@nats-io/nats-core';
import { connect } from '@nats-io/transport-node';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import type { AgentEvent } from '../../src/protocol/index.ts';
import { startProviderService } from '../../services/provider/index.ts';
import type { ProviderService } from '../../services/provider/index.ts';
import { startRuntimeService } from '../../services/runtime/index.ts';
import type { Runtime } from '../../services/runtime/index.ts';
import { startToolsService } from '../../services/tools/index.ts';
import type { ToolsService } from '../../services/tools/index.ts';
import { createGateTool } from '../helpers/gate-tool.ts';
import { startNatsServer } from '../helpers/nats-server.ts';
import type { TestNatsServer } from '../helpers/nats-server.ts';
import { collectEvents, requestJson, silentLogger } from '../helpers/stack.ts';

// A provider that restarts while a turn compacts: the summary call, like a step's own call, waits for a provider to
// serve the model again (AGENTBUS_WAIT_FOR_SERVICE_MS) instead of failing the turn at once.

const gate = createGateTool('hold');
let server: TestNatsServer;
let workspace: string;
let connections: NatsConnection[] = [];
let tools: ToolsService;
let runtime: Runtime;
let provider: ProviderService | undefined;

async function connection(): Promise<NatsConnection> {
  const nc = await connect({ servers: server.url });
  connections.push(nc);
  return nc;
}

beforeAll(async () => {
  server = await startNatsServer();
  workspace = await mkdtemp(join(tmpdir(), 'agentbus-ws-'));
  tools = await startToolsService({ nc: await connection(), logger: silentLogger(), workspace, perTenant: false, extraTools: [gate.tool] });
  // First provider: the step that asks for the held tool. No room for history (the answer's reserve is over the
  // window), so the next step compacts.
  provider = await startProviderService({ nc: await connection(), logger: silentLogger(), script: { responses: [{ toolCalls: [{ name: 'hold', args: {} }] }] } });
  runtime = await startRuntimeService({ nc: await connection(), logger: silentLogger(), config: { maxOutputTokens: 40_000, waitForServiceMs: 20_000 } });
});

afterAll(async () => {
  gate.open();
  await runtime?.stop().catch(() => undefined);
  await provider?.stop().catch(() => undefined);
  await tools?.stop().catch(() => undefined);
  for (const nc of connections) await nc.close().catch(() => undefined);
  connections = [];
  await server?.stop();
  if (workspace) await rm(workspace, { recursive: true, force: true });
});

describe('a compaction while no provider serves the model', () => {
  it('waits for a provider to come back, with retry events, and the turn yields with its summary', async () => {
    const watcher = collectEvents(await connection(), 'default', 'compact-wait-1');
    const accepted = await requestJson(await connection(), 'agentbus.default.sessions.compact-wait-1.prompt', { text: 'go' });
    expect(accepted).toMatchObject({ accepted: true });
    await expect.poll(() => gate.effects.length, { timeout: 10_000 }).toBe(1);
    // The provider goes away while the tool runs; the next step must compact first.
    await provider!.stop();
    provider = undefined;
    gate.open();
    await watcher.until((seen) => seen.some((event) => event.type === 'retry'), 10_000);
    // A fresh provider process starts its script for this session anew: the summary, then the answer.
    provider = await startProviderService({ nc: await connection(), logger: silentLogger(), script: { responses: [{ text: 'the summary' }, { text: 'done' }] } });
    const events = await watcher.until((seen) => seen.some((event) => event.type === 'turn.ended'), 20_000);
    watcher.stop();
    const ended = events.find((event): event is Extract<AgentEvent, { type: 'turn.ended' }> => event.type === 'turn.ended');
    expect([ended?.data.reason, ended?.data.text]).toEqual(['yielded', 'done']);
    const summary = events.find((event) => event.type === 'summary.created');
    expect(summary?.type === 'summary.created' && summary.data.text).toBe('the summary');
    const retries = events.filter((event) => event.type === 'retry');
    expect(retries.length).toBeGreaterThan(0);
    expect(retries[0]).toMatchObject({ data: { error: { code: 'no_responders' }, model: 'scripted:default' } });
  }, 45_000);
});
