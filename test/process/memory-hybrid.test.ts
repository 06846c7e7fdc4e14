import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { connect } from '@nats-io/transport-node';
import type { NatsConnection } from '@nats-io/nats-core';
import { createMemoryClient } from '../../src/bus/memory-client.ts';
import { createCodec } from '../../src/protocol/index.ts';
import { resolveProviderConfig, startProviderService } from '../../services/provider/index.ts';
import type { ProviderService } from '../../services/provider/index.ts';
import { startRuntimeService } from '../../services/runtime/index.ts';
import type { Runtime } from '../../services/runtime/index.ts';
import { startNatsServer } from '../helpers/nats-server.ts';
import type { TestNatsServer } from '../helpers/nats-server.ts';
import { startServiceProcess } from '../helpers/service-process.ts';
import type { ServiceProcess } from '../helpers/service-process.ts';
import { collectEvents, requestJson, silentLogger } from '../helpers/stack.ts';

const codec = createCodec();
let nats: TestNatsServer;
let client: NatsConnection;
let providerConnection: NatsConnection;
let provider: ProviderService | undefined;
let runtime: Runtime;
let memory: ServiceProcess | undefined;

/** What memory's $SRV.STATS says of its index. */
async function memoryStats(): Promise<{ entries: number; vectors: number; pendingVectors: number; vectorStatus: { state: string } }> {
  const reply = await client.request('$SRV.STATS.agentbus-memory', new Uint8Array(), { timeout: 5_000 });
  return (JSON.parse(new TextDecoder().decode(reply.data)) as { data: never }).data;
}

async function startMemory(): Promise<ServiceProcess> {
  // The default model's provider embeds: scripted, offline.
  const started = startServiceProcess('services/memory/main.ts', { NATS_URL: nats.url, AGENTBUS_MODEL: 'scripted:default', AGENTBUS_MEMORY_SNAPSHOT_INTERVAL_MS: '200' });
  await started.waitFor('memory caught up with the log', 30_000);
  return started;
}

async function turn(tenant: string, sessionId: string, text: string): Promise<void> {
  const watcher = collectEvents(client, tenant, sessionId);
  expect((await requestJson(client, `agentbus.${tenant}.sessions.${sessionId}.prompt`, { text }, 10_000)).accepted).toBe(true);
  await watcher.until((seen) => seen.some((event) => event.type === 'turn.ended'), 20_000);
  watcher.stop();
}

beforeAll(async () => {
  nats = await startNatsServer();
  client = await connect({ servers: nats.url });
  providerConnection = await connect({ servers: nats.url });
  provider = await startProviderService({ nc: providerConnection, logger: silentLogger(), config: resolveProviderConfig({}), script: { responses: [] } });
  runtime = await startRuntimeService({ nc: await connect({ servers: nats.url }), logger: silentLogger(), config: { defaultModel: 'scripted:default', leaseTtlMs: 3_000 } });
  memory = await startMemory();
}, 60_000);

afterAll(async () => {
  await memory?.stop('SIGKILL');
  await runtime?.stop().catch(() => undefined);
  await provider?.stop().catch(() => undefined);
  await providerConnection?.close();
  await client?.close();
  await nats?.stop();
});

describe('hybrid memory search, embeddings from the provider service', () => {
  it('finds by vectors what full text misses, fused by reciprocal rank, within the tenant only', async () => {
    await turn('acme', 'fruit', 'Remember: my favourite fruit is the kumquat.');
    await turn('acme', 'boat', 'The boat is moored in the harbour.');
    await turn('globex', 'other', 'Our kumquat tree died.');
    await expect.poll(async () => (await memoryStats()).pendingVectors === 0 && (await memoryStats()).vectors >= 6, { timeout: 15_000 }).toBe(true);
    const memoryClient = createMemoryClient({ nc: client, codec });
    // "kumquats" is not a word of any message: BM25 alone finds nothing.
    const fullText = await memoryClient.search('acme', { query: 'kumquats', types: ['user.message'] });
    expect(fullText.mode).toBe('hybrid');
    expect(fullText.hits[0]).toMatchObject({ sessionId: 'fruit', type: 'user.message', text: 'Remember: my favourite fruit is the kumquat.' });
    expect(fullText.hits.every((hit) => hit.score > 0 && hit.score <= 2 / 61)).toBe(true);
    expect(fullText.hits.map((hit) => hit.sessionId)).not.toContain('other');
    expect((await memoryClient.search('globex', { query: 'kumquats', k: 10 })).hits.map((hit) => hit.sessionId)).toEqual(['other', 'other']);
    expect((await memoryStats()).vectorStatus).toMatchObject({ state: 'on', model: 'scripted-embed', dimensions: 256 });
  });

  it('keeps its vectors in the snapshot it writes as it stops: a restart embeds nothing again', async () => {
    expect(await memory!.stop('SIGTERM')).toBe(0);
    memory = await startMemory();
    const stats = await memoryStats();
    expect(stats.vectors).toBeGreaterThanOrEqual(6);
    expect(stats.pendingVectors).toBe(0);
    expect((await createMemoryClient({ nc: client, codec }).search('acme', { query: 'kumquats' })).mode).toBe('hybrid');
  }, 60_000);

  it('searches full text only, and says why, while the provider cannot embed the query', async () => {
    await provider!.stop();
    provider = undefined;
    const reply = await createMemoryClient({ nc: client, codec }).search('acme', { query: 'harbour' });
    expect(reply.mode).toBe('full-text');
    expect(reply.note).toBe('full-text only: the query could not be embedded in time');
    expect(reply.hits.map((hit) => hit.sessionId)).toContain('boat');
  });
});
