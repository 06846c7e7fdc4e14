import { afterAll, beforeAll, describe, expect, it, vi } from 'vitest';
import { jetstream, jetstreamManager } from '@nats-io/jetstream';
import { Kvm } from '@nats-io/kv';
import { connect } from '@nats-io/transport-node';
import type { NatsConnection } from '@nats-io/nats-core';
import { createEmbedClient } from '../../src/bus/embed-client.ts';
import { createMemoryClient } from '../../src/bus/memory-client.ts';
import { ensureStreams } from '../../src/bus/streams.ts';
import { LogEventType, createCodec, createEnvelopeFactory, createSubjects, streamNames } from '../../src/protocol/index.ts';
import { startMemoryService } from '../../services/memory/index.ts';
import type { MemoryServiceOptions } from '../../services/memory/index.ts';
import { resolveProviderConfig, startProviderService } from '../../services/provider/index.ts';
import type { ProviderService } from '../../services/provider/index.ts';
import { captureLogs } from '../helpers/captured-logs.ts';
import { useNatsServer } from '../helpers/nats-fixture.ts';
import { silentLogger } from '../helpers/stack.ts';

// The vector side of memory runs in a thread of its own: a search is answered while that thread still inserts a
// large batch (here: every vector of a snapshot, handed over at once on restart), and when the thread fails memory
// logs it and answers on from full text.

const nats = useNatsServer();
const codec = createCodec();
const subjects = createSubjects('agentbus');
/** Vectors in the snapshot: enough that inserting them takes the thread a while (about 50–200 µs each). */
const EVENTS = 12_000;
let provider: ProviderService;
let providerConnection: NatsConnection;

interface MemoryData {
  vectors: number;
  pendingVectors: number;
  queuedVectors: number;
  vectorFailure?: string;
}

async function memoryStats(): Promise<MemoryData> {
  const reply = await nats.nc.request('$SRV.STATS.agentbus-memory', new Uint8Array(), { timeout: 10_000 });
  return (JSON.parse(new TextDecoder().decode(reply.data)) as { data: MemoryData }).data;
}

async function startMemory(extra: Partial<MemoryServiceOptions> = {}) {
  const nc = await connect({ servers: nats.server.url });
  // The scripted provider's embedder (256 dimensions), over the bus as in main.ts.
  const embedder = createEmbedClient({ nc, codec, subjects, provider: 'scripted' });
  const memory = await startMemoryService({ nc, logger: silentLogger(), embedder, snapshots: { everyEvents: 1_000_000, intervalMs: 600_000 }, ...extra });
  return {
    memory,
    async stop() {
      await memory.stop();
      await nc.close();
    },
  };
}

beforeAll(async () => {
  const jsm = await jetstreamManager(nats.nc);
  await ensureStreams(jsm, { prefix: 'agentbus' });
  await new Kvm(nats.nc).create(streamNames().tombstones, { history: 1 });
  providerConnection = await connect({ servers: nats.server.url });
  provider = await startProviderService({ nc: providerConnection, logger: silentLogger(), config: resolveProviderConfig({}), script: { responses: [] } });
  const envelopes = createEnvelopeFactory({ newId: () => `e${Math.random()}`, now: () => Date.now() });
  const js = jetstream(nats.nc);
  const text = (index: number) => (index === EVENTS - 1 ? 'my favourite fruit is the kumquat' : `note ${index}: the ferry leaves at ${index % 24} o'clock from pier ${index % 13}`);
  for (let start = 0; start < EVENTS; start += 500) {
    await Promise.all(
      Array.from({ length: Math.min(500, EVENTS - start) }, (_, offset) => {
        const index = start + offset;
        const sessionId = `s${index % 40}`;
        const event = envelopes.create(LogEventType.userMessage, { tenant: 'acme', sessionId, turnId: `t${index}`, step: 1 }, { text: text(index) });
        return js.publish(subjects.log('acme', sessionId), codec.encode(event));
      }),
    );
  }
  // Everything embedded once, and kept in the snapshot written as it stops.
  const first = await startMemory();
  await first.memory.caughtUp;
  await first.memory.vectorsIdle();
  await vi.waitFor(async () => {
    const stats = await memoryStats();
    if (stats.queuedVectors !== 0 || stats.vectors !== EVENTS) throw new Error(`${stats.vectors} vectors, ${stats.queuedVectors} queued`);
  }, { timeout: 120_000, interval: 200 });
  await first.stop();
}, 300_000);

afterAll(async () => {
  await provider?.stop();
  await providerConnection?.close();
});

describe('memory vectors in a thread of their own', () => {
  it('answers a hybrid search while the thread still inserts a large batch', async () => {
    const restarted = await startMemory();
    try {
      await restarted.memory.caughtUp;
      // The restore handed every vector of the snapshot to the thread at once; none needed embedding again.
      const before = await memoryStats();
      expect(before.vectors).toBe(EVENTS);
      expect(before.pendingVectors).toBe(0);
      expect(before.queuedVectors).toBeGreaterThan(0);
      const client = createMemoryClient({ nc: nats.nc, codec });
      const found = await client.search('acme', { query: 'kumquat', k: 3 }, { timeoutMs: 5_000 });
      // Not behind the batch: answered (by both rankings) while most of it still waits for the graph.
      const after = await memoryStats();
      expect(after.queuedVectors).toBeGreaterThan(0);
      expect(found.hits[0]).toMatchObject({ sessionId: `s${(EVENTS - 1) % 40}`, text: 'my favourite fruit is the kumquat' });
      expect(found.mode).toBe('hybrid');
      await expect.poll(async () => (await memoryStats()).queuedVectors, { timeout: 120_000, interval: 200 }).toBe(0);
    } finally {
      await restarted.stop();
    }
  }, 180_000);

  it('logs a failed vector thread and answers on from full text', async () => {
    const { logger, lines } = captureLogs('warn');
    // A thread heap far too small for the snapshot's vectors: the thread ends, out of memory, while it loads them.
    const restarted = await startMemory({ logger, vectorThreadLimits: { maxOldGenerationSizeMb: 2, maxYoungGenerationSizeMb: 1 } });
    try {
      await restarted.memory.caughtUp;
      await expect.poll(async () => (await memoryStats()).vectorFailure, { timeout: 60_000, interval: 200 }).toMatch(/memory limit|out of memory/);
      expect(lines.filter((line) => line.msg === 'the vector thread failed: memory searches by full text only until a restart or rebuild')).toHaveLength(1);
      expect(lines.find((line) => line.level === 50)).toMatchObject({ reason: expect.stringMatching(/vector thread/) });
      const client = createMemoryClient({ nc: nats.nc, codec });
      const found = await client.search('acme', { query: 'kumquat', k: 3 }, { timeoutMs: 5_000 });
      expect(found.mode).toBe('full-text');
      expect(found.note).toMatch(/^full-text only: the vector thread/);
      expect(found.hits[0]).toMatchObject({ text: 'my favourite fruit is the kumquat' });
      // Filters and other requests as before.
      expect((await client.search('acme', { query: 'ferry pier', k: 2, sessionId: 's3' }, { timeoutMs: 5_000 })).hits.every((hit) => hit.sessionId === 's3')).toBe(true);
      expect((await client.listSessions('acme', { limit: 50 })).sessions).toHaveLength(40);
    } finally {
      await restarted.stop();
    }
  }, 180_000);
});
