import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { z } from 'zod';
import { connect } from '@nats-io/transport-node';
import { headers } from '@nats-io/nats-core';
import type { NatsConnection } from '@nats-io/nats-core';
import { createAgentbusClient } from '../src/client/index.ts';
import { createCodec } from '../src/protocol/index.ts';
import { defineTool } from '../src/tool-sdk/index.ts';
import { startMemoryService } from '../services/memory/index.ts';
import type { MemoryService } from '../services/memory/index.ts';
import { collectEvents, requestJson, silentLogger, startStack } from './helpers/stack.ts';
import type { TestStack } from './helpers/stack.ts';

const codec = createCodec();
let stack: TestStack;
let memoryConnection: NatsConnection;
let memory: MemoryService;

/** A tool that counts its calls per tenant in the tenant's state, with a compare-and-set. */
const counter = defineTool({
  name: 'count_visit',
  description: 'counts visits, remembered across sessions',
  parameters: z.object({}),
  tier: 'side_effecting',
  timeoutMs: 5_000,
  idempotent: false,
  execute: async (_args, context) => {
    for (;;) {
      const loaded = await context.state.load<number>('visits');
      const next = loaded.found ? loaded.value + 1 : 1;
      try {
        await context.state.save('visits', next, { expectedRevision: loaded.found ? loaded.revision : 0 });
        return `visit ${next}`;
      } catch (err) {
        if ((err as { code?: string }).code !== 'conflict') throw err;
      }
    }
  },
});

async function startMemory(): Promise<MemoryService> {
  const started = await startMemoryService({ nc: memoryConnection, logger: silentLogger(), snapshots: false });
  await started.caughtUp;
  return started;
}

beforeAll(async () => {
  stack = await startStack({
    script: { responses: [{ text: 'Counting.', toolCalls: [{ name: 'count_visit', args: {} }] }, { text: 'Counted.' }] },
    extraTools: [counter],
  });
  memoryConnection = await connect({ servers: stack.server.url });
  memory = await startMemory();
}, 60_000);

afterAll(async () => {
  await memory?.stop();
  await memoryConnection?.close();
  await stack?.stop();
});

describe('per-tenant agent state', () => {
  it('saves, loads and deletes through the SDK, with revisions and compare-and-set', async () => {
    const state = createAgentbusClient({ nc: stack.client }).state('acme');
    expect(await state.load('preferences/units')).toEqual({ found: false });
    const { revision } = await state.save('preferences/units', { metric: true, digits: [1, 2] });
    expect(await state.load('preferences/units')).toMatchObject({ found: true, value: { metric: true, digits: [1, 2] }, revision, updatedAt: expect.any(Number) });
    await expect(state.save('preferences/units', 'stale', { expectedRevision: revision + 10 })).rejects.toMatchObject({ code: 'conflict' });
    await expect(state.save('preferences/units', 'new', { expectedRevision: 0 })).rejects.toMatchObject({ code: 'conflict' });
    expect((await state.save('preferences/units', 'fresh', { expectedRevision: revision })).revision).toBeGreaterThan(revision);
    await state.delete('preferences/units');
    expect(await state.load('preferences/units')).toEqual({ found: false });
    expect((await state.save('preferences/units', 'again', { expectedRevision: 0 })).revision).toBeGreaterThan(0);
  });

  it('keeps tenants apart: the tenant is the subject\'s, whatever the key says', async () => {
    const sdk = createAgentbusClient({ nc: stack.client });
    await sdk.state('acme').save('secret', 'acme only');
    expect(await sdk.state('globex').load('secret')).toEqual({ found: false });
    // A key cannot reach into another tenant's namespace.
    await expect(sdk.state('globex').load('acme.secret')).resolves.toEqual({ found: false });
    expect(() => sdk.state('no such tenant!')).toThrow(/tenant/);
  });

  it('lets a tool keep state across sessions of its tenant, through the tool worker', async () => {
    const run = async (tenant: string, sessionId: string) => {
      const events = collectEvents(stack.client, tenant, sessionId);
      expect((await requestJson(stack.client, `agentbus.${tenant}.sessions.${sessionId}.prompt`, { text: 'count me' }, 10_000)).accepted).toBe(true);
      const seen = await events.until((all) => all.some((event) => event.type === 'turn.ended'), 20_000);
      events.stop();
      const result = seen.find((event) => event.type === 'tool.result');
      return result?.type === 'tool.result' ? result.data.output : undefined;
    };
    expect(await run('acme', 'visit-1')).toBe('visit 1');
    expect(await run('acme', 'visit-2')).toBe('visit 2');
    expect(await run('globex', 'visit-1')).toBe('visit 1');
    expect(await createAgentbusClient({ nc: stack.client }).state('acme').load('visits')).toMatchObject({ found: true, value: 2 });
  });

  it('survives a restart of the memory service: the bucket is durable', async () => {
    await memory.stop();
    memory = await startMemory();
    expect(await createAgentbusClient({ nc: stack.client }).state('acme').load('secret')).toMatchObject({ found: true, value: 'acme only' });
  });

  it('refuses bad keys, oversized values and malformed requests with typed errors', async () => {
    const state = createAgentbusClient({ nc: stack.client }).state('acme');
    await expect(state.save('bad key', 1)).rejects.toMatchObject({ code: 'invalid_input' });
    await expect(state.load('../escape')).rejects.toMatchObject({ code: 'invalid_input' });
    await expect(state.save('x'.repeat(257), 1)).rejects.toMatchObject({ code: 'invalid_input' });
    await expect(state.save('big', 'x'.repeat(300 * 1024))).rejects.toMatchObject({ code: 'payload_too_large' });
    const ask = async (data: Uint8Array, contentType?: string) => {
      const requestHeaders = headers();
      if (contentType) requestHeaders.set('Content-Type', contentType);
      return codec.decode((await stack.client.request('agentbus.acme.state.save', data, { timeout: 5_000, headers: requestHeaders })).data) as { error?: { code: string }; ok?: boolean };
    };
    expect((await ask(new Uint8Array([0xc1]))).error?.code).toBe('invalid_input');
    expect((await ask(new TextEncoder().encode('{"key":"k"'), 'application/json')).error?.code).toBe('invalid_input');
    expect((await ask(codec.encode({ key: 'k', value: 1, tenant: 'globex' }))).error?.code).toBe('invalid_input');
    expect(await ask(new TextEncoder().encode('{"key":"from-json","value":{"a":1}}'), 'application/json')).toMatchObject({ ok: true });
    expect(await state.load('from-json')).toMatchObject({ found: true, value: { a: 1 } });
  });
});
