import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { z } from 'zod';
import { connect } from '@nats-io/transport-node';
import { headers } from '@nats-io/nats-core';
import type { NatsConnection } from '@nats-io/nats-core';
import { createAgentbusClient } from '../../src/client/index.ts';
import { createCodec } from '../../src/protocol/index.ts';
import { defineTool } from '../../src/tool-sdk/index.ts';
import { jetstreamManager } from '@nats-io/jetstream';
import { DEFAULT_STATE_LIMITS, startMemoryService } from '../../services/memory/index.ts';
import { openStateStore } from '../../services/memory/state-store.ts';
import type { MemoryService, StateLimits } from '../../services/memory/index.ts';
import { collectEvents, requestJson, silentLogger, startStack } from '../helpers/stack.ts';
import type { TestStack } from '../helpers/stack.ts';

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

describe('state limits', () => {
  /** Restarts memory with these state limits (and rate), as an operator would by setting the environment. */
  const restartWith = async (options: { stateLimits?: StateLimits; tenantRate?: { perSecond: number; burst: number } }) => {
    await memory.stop();
    memory = await startMemoryService({ nc: memoryConnection, logger: silentLogger(), snapshots: false, ...options });
    await memory.caughtUp;
  };
  // msgpack of a string of n characters (256 to 65535) is n + 3 bytes.
  const valueOf = (bytes: number) => 'x'.repeat(bytes - 3);
  const limits: StateLimits = { ...DEFAULT_STATE_LIMITS, maxValueBytes: 2_000, tenantMaxBytes: 4_000 };

  it('gives the bucket its max_bytes and value size, an existing bucket too (STREAM.INFO)', async () => {
    await restartWith({ stateLimits: { ...limits, bucketMaxBytes: 50 * 1024 * 1024 } });
    const info = await (await jetstreamManager(stack.client)).streams.info('KV_AGENTBUS_STATE');
    expect(info.config).toMatchObject({ max_bytes: 50 * 1024 * 1024, max_msg_size: 2_000 + 1024, discard: 'new' });
  });

  it('refuses a value past the per-key size and a save past the tenant total, while another tenant saves', async () => {
    const sdk = createAgentbusClient({ nc: stack.client });
    const quota = sdk.state('quota-a');
    await expect(quota.save('huge', valueOf(2_001))).rejects.toMatchObject({ code: 'payload_too_large', message: expect.stringContaining('2000') });
    await quota.save('k1', valueOf(1_500));
    await quota.save('k2', valueOf(1_500));
    const refused = quota.save('k3', valueOf(1_500));
    await expect(refused).rejects.toMatchObject({ code: 'quota_exceeded', retryable: false });
    await expect(refused).rejects.toThrow(/tenant quota-a's state would hold 4500 bytes, past its limit of 4000 \(AGENTBUS_STATE_TENANT_MAX_BYTES\)/);
    expect(await quota.load('k3')).toEqual({ found: false });
    // Another tenant has its own total.
    await sdk.state('quota-b').save('k1', valueOf(1_500));
    await sdk.state('quota-b').save('k2', valueOf(1_500));
  });

  it('counts an overwrite once and a delete as freed, and the figure survives a memory restart', async () => {
    const quota = createAgentbusClient({ nc: stack.client }).state('quota-a');
    // k1 and k2 hold 3000: overwriting k1 with as much again is no more.
    await quota.save('k1', valueOf(1_500));
    await quota.save('k1', valueOf(500));
    await quota.save('k3', valueOf(1_500)); // 500 + 1500 + 1500 = 3500
    await expect(quota.save('k4', valueOf(1_000))).rejects.toMatchObject({ code: 'quota_exceeded' });
    await quota.delete('k3');
    await quota.save('k4', valueOf(1_000)); // 500 + 1500 + 1000 = 3000
    await restartWith({ stateLimits: limits });
    await expect(quota.save('k5', valueOf(1_100))).rejects.toMatchObject({ code: 'quota_exceeded', message: expect.stringContaining('4100 bytes') });
    await quota.save('k5', valueOf(1_000)); // exactly 4000
    // A compare-and-set overwrite is counted as an overwrite too.
    const loaded = await quota.load('k5');
    if (!loaded.found) throw new Error('k5 was saved');
    await quota.save('k5', valueOf(900), { expectedRevision: loaded.revision });
    // 3900 + 100 (98 characters are 100 bytes of msgpack): it fits only because k5's overwrite freed 100.
    await quota.save('k6', 'x'.repeat(98));
    await expect(quota.save('k7', 'x')).rejects.toMatchObject({ code: 'quota_exceeded' });
  });

  it('counts what another memory instance saves and deletes: a tenant cannot pass its total by spreading saves', async () => {
    const [first, second] = await Promise.all([
      openStateStore({ nc: memoryConnection, codec, logger: silentLogger(), limits }),
      openStateStore({ nc: stack.client, codec, logger: silentLogger(), limits }),
    ]);
    try {
      await first.save('quota-d', { key: 'a', value: valueOf(1_500) });
      await first.save('quota-d', { key: 'b', value: valueOf(1_500) });
      // The second instance hears the first one's saves from the bucket.
      await expect.poll(() => second.usage('quota-d'), { timeout: 5_000 }).toBe(3_000);
      await expect(second.save('quota-d', { key: 'c', value: valueOf(1_500) })).rejects.toMatchObject({ code: 'quota_exceeded' });
      await first.delete('quota-d', 'a');
      await expect.poll(() => second.usage('quota-d'), { timeout: 5_000 }).toBe(1_500);
      await second.save('quota-d', { key: 'c', value: valueOf(1_500) });
      await expect.poll(() => first.usage('quota-d'), { timeout: 5_000 }).toBe(3_000);
    } finally {
      first.stop();
      second.stop();
    }
  });

  it('refuses a save into a full bucket with quota_exceeded, and a delete makes room again', async () => {
    const jsm = await jetstreamManager(stack.client);
    const held = (await jsm.streams.info('KV_AGENTBUS_STATE')).state.bytes;
    await restartWith({ stateLimits: { ...limits, tenantMaxBytes: 0, bucketMaxBytes: held + 3_000 } });
    const full = createAgentbusClient({ nc: stack.client }).state('quota-c');
    const results = [];
    for (let index = 0; index < 3; index++) results.push(await full.save(`k${index}`, valueOf(1_500)).then(() => 'saved', (err: { code?: string; message?: string }) => err));
    expect(results.slice(0, 1)).toEqual(['saved']);
    expect(results.at(-1)).toMatchObject({ code: 'quota_exceeded', message: expect.stringContaining('AGENTBUS_STATE_MAX_BYTES') });
    await full.delete('k0');
    await expect(full.save('again', valueOf(1_000))).resolves.toMatchObject({ revision: expect.any(Number) });
  });

  it('limits one tenant\'s memory request rate with a retryable rate_limited, and no other tenant', async () => {
    await restartWith({ tenantRate: { perSecond: 1, burst: 5 } });
    const sdk = createAgentbusClient({ nc: stack.client });
    const outcomes = await Promise.all(Array.from({ length: 10 }, () => sdk.state('noisy').load('k').then(() => 'ok', (err: { code?: string; retryable?: boolean }) => err)));
    expect(outcomes.filter((outcome) => outcome === 'ok').length).toBeLessThanOrEqual(6);
    expect(outcomes.find((outcome) => outcome !== 'ok')).toMatchObject({ code: 'rate_limited', retryable: true });
    expect(await sdk.state('quiet').load('k')).toEqual({ found: false });
    const search = codec.decode((await stack.client.request('agentbus.noisy.memory.search', codec.encode({ query: 'x' }), { timeout: 5_000 })).data) as { error?: { code: string } };
    expect(search.error?.code).toBe('rate_limited');
  });
});
