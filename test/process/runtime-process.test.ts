import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { connect } from '@nats-io/transport-node';
import type { NatsConnection } from '@nats-io/nats-core';
import { z } from 'zod';
import { createCodec } from '../../src/protocol/index.ts';
import type { GenerateRequest } from '../../src/protocol/index.ts';
import { defineTool } from '../../src/tool-sdk/index.ts';
import { startProviderService } from '../../services/provider/index.ts';
import type { Script } from '../../services/provider/index.ts';
import { startToolsService } from '../../services/tools/index.ts';
import { startNatsServer } from '../helpers/nats-server.ts';
import type { TestNatsServer } from '../helpers/nats-server.ts';
import { startServiceProcess } from '../helpers/service-process.ts';
import { createGateTool } from '../helpers/gate-tool.ts';
import type { ServiceProcess } from '../helpers/service-process.ts';
import { collectEvents, requestJson, silentLogger } from '../helpers/stack.ts';

const codec = createCodec();
let server: TestNatsServer;
let services: NatsConnection;
let client: NatsConnection;
let stopServices: Array<() => Promise<void>> = [];
const markEffects: string[] = [];
const gate = createGateTool('wait_for_release');

const mark = defineTool({
  name: 'mark',
  description: 'records that it ran',
  parameters: z.object({}),
  tier: 'side_effecting',
  timeoutMs: 10_000,
  idempotent: false,
  execute: (_args, { effectId }) => {
    markEffects.push(effectId);
    return 'marked';
  },
});

function runtimeProcess(): ServiceProcess {
  return startServiceProcess('services/runtime/main.ts', { NATS_URL: server.url, AGENTBUS_LEASE_TTL_MS: '1500' });
}

beforeAll(async () => {
  server = await startNatsServer();
  services = await connect({ servers: server.url });
  client = await connect({ servers: server.url });
  const tools = await startToolsService({ nc: services, logger: silentLogger(), extraTools: [mark, gate.tool] });
  stopServices = [() => tools.stop()];
});

/** A provider service with its own script, for one test. */
async function withProvider<T>(responses: Script['responses'], run: () => Promise<T>): Promise<T> {
  const provider = await startProviderService({ nc: services, logger: silentLogger(), script: { responses } });
  try {
    return await run();
  } finally {
    await provider.stop();
  }
}

/** Runs `run` and makes sure every process it started is gone afterwards. */
async function withProcesses(run: (spawnRuntime: () => ServiceProcess) => Promise<void>): Promise<void> {
  const started: ServiceProcess[] = [];
  try {
    await run(() => {
      const child = runtimeProcess();
      started.push(child);
      return child;
    });
  } finally {
    for (const child of started) await child.stop('SIGKILL');
  }
}

afterAll(async () => {
  gate.open();
  for (const stop of stopServices) await stop().catch(() => undefined);
  await client?.close();
  await services?.close();
  await server?.stop();
});

describe('runtime processes', () => {
  it('a new runtime process continues a session the previous one started', () =>
    withProvider([{ text: 'first answer' }, { text: 'second answer' }], () =>
      withProcesses(async (runtimeProcess) => {
    const seen: GenerateRequest[] = [];
    const spy = client.subscribe('agentbus.provider.scripted.generate', {
      callback: (_error, message) => {
        seen.push(codec.decode(message.data, message.headers?.get('Content-Type')) as GenerateRequest);
      },
    });
    const watcher = collectEvents(client, 'acme', 'carry-on');

    const first = runtimeProcess();
    await first.waitFor('runtime started');
    await requestJson(client, 'agentbus.acme.sessions.carry-on.prompt', { text: 'remember the word kumquat' });
    await watcher.until((events) => events.some((event) => event.type === 'turn.ended'));
    expect(await first.stop('SIGTERM')).toBe(0);

    const second = runtimeProcess();
    await second.waitFor('runtime started');
    const reply = await requestJson(client, 'agentbus.acme.sessions.carry-on.prompt', { text: 'what was the word?' });
    expect(reply.accepted).toBe(true);
    await watcher.until((events) => events.filter((event) => event.type === 'turn.ended').length === 2);
    await second.stop('SIGTERM');

    const lastRequest = seen.at(-1);
    const contents = lastRequest?.messages.map((message) => `${message.role}:${message.content}`);
    expect(contents).toEqual(expect.arrayContaining(['user:remember the word kumquat', 'assistant:first answer', 'user:what was the word?']));
    expect(watcher.events.filter((event) => event.type === 'session.created')).toHaveLength(1);
    spy.unsubscribe();
    watcher.stop();
  })));

  it('a runtime that crashes mid-turn is resumed by another without running completed tool calls again', () =>
    withProvider(
      [
        { text: 'first answer' },
        { toolCalls: [{ name: 'mark', args: {} }] },
        { toolCalls: [{ name: 'wait_for_release', args: {} }] },
        { text: 'all done' },
      ],
      () =>
      withProcesses(async (runtimeProcess) => {
    const watcher = collectEvents(client, 'acme', 'crash-1');
    const first = runtimeProcess();
    await first.waitFor('runtime started');
    await requestJson(client, 'agentbus.acme.sessions.crash-1.prompt', { text: 'step through' });
    await watcher.until((events) => events.some((event) => event.type === 'turn.ended'));
    await requestJson(client, 'agentbus.acme.sessions.crash-1.prompt', { text: 'mark, then wait' });
    // Kill the runtime while the worker runs its call: the call is in flight, its result not logged.
    await expect.poll(() => gate.effects.length, { timeout: 10_000 }).toBe(1);
    await first.stop('SIGKILL');

    const second = runtimeProcess();
    try {
      await expect.poll(() => gate.effects.length, { timeout: 20_000 }).toBe(2);
    } catch (error) {
      const seen = watcher.events.map((event) => (event.type === 'state' ? `${event.data.machine}:${event.data.value}` : event.type));
      throw new Error(`not resumed; events: ${seen.join(', ')}; the second runtime said:\n${second.output()}`, { cause: error });
    }
    gate.open();
    const events = await watcher.until((seen) => seen.filter((event) => event.type === 'turn.ended').length === 2, 15_000);
    await second.stop('SIGTERM');

    const ending = events.filter((event) => event.type === 'turn.ended')[1];
    expect(ending).toMatchObject({ data: { reason: 'yielded', text: 'all done' } });
    expect(markEffects).toHaveLength(1);
    expect(new Set(gate.effects).size).toBe(1);
    watcher.stop();
  })));
});
