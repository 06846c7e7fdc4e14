import { describe, expect, it } from 'vitest';
import { jetstream, jetstreamManager } from '@nats-io/jetstream';
import { Kvm } from '@nats-io/kv';
import { connect } from '@nats-io/transport-node';
import { createMemoryClient } from '../../src/bus/memory-client.ts';
import { ensureStreams } from '../../src/bus/streams.ts';
import { LogEventType, createCodec, createEnvelopeFactory, createSubjects, streamNames } from '../../src/protocol/index.ts';
import { queryEmbedWait, startMemoryService } from '../../services/memory/index.ts';
import type { Embedder } from '../../services/memory/vectorizer.ts';
import { useNatsServer } from '../helpers/nats-fixture.ts';
import { silentLogger } from '../helpers/stack.ts';

// Memory answers within the caller's wait (the `Agentbus-Timeout-Ms` header the memory client sends): full-text hits
// when the query's embedding is late, fused with vectors when it comes in time.

const nats = useNatsServer();
const codec = createCodec();
const subjects = createSubjects('agentbus');

/** An embedder whose answers take `delayMs` (changed by the test), or until the caller's signal aborts. */
function slowEmbedder(): Embedder & { delayMs: number; calls: number } {
  const embedder = {
    delayMs: 0,
    calls: 0,
    async embed(texts: string[], options: { signal?: AbortSignal; timeoutMs?: number } = {}) {
      embedder.calls += 1;
      const wait = Math.min(embedder.delayMs, options.timeoutMs ?? Infinity);
      await new Promise<void>((resolve, reject) => {
        const timer = setTimeout(resolve, wait);
        options.signal?.addEventListener('abort', () => (clearTimeout(timer), reject(options.signal!.reason)), { once: true });
      });
      if (embedder.delayMs > wait) throw new Error('embedding timed out');
      return { model: 'slow', dimensions: 4, vectors: texts.map((text) => [text.includes('kumquat') ? 1 : 0, text.includes('ferry') ? 1 : 0, 0.1, 0]) };
    },
  };
  return embedder;
}

describe('memory search within the caller budget', () => {
  it('cuts the query embedding to the caller wait less a margin', () => {
    expect(queryEmbedWait(200, undefined)).toBe(200);
    expect(queryEmbedWait(200, 300)).toBe(200);
    expect(queryEmbedWait(200, 150)).toBe(120);
    expect(queryEmbedWait(200, 20)).toBe(0);
  });

  it('answers full-text hits within a small budget when the embedder is slow, and fuses vectors when it is fast', async () => {
    const jsm = await jetstreamManager(nats.nc);
    await ensureStreams(jsm, { prefix: 'agentbus' });
    await new Kvm(nats.nc).create(streamNames().tombstones, { history: 1 });
    const envelopes = createEnvelopeFactory({ newId: () => `e${Math.random()}`, now: () => Date.now() });
    const js = jetstream(nats.nc);
    for (const [sessionId, text] of [['fruit', 'my favourite fruit is the kumquat'], ['boat', 'we took the ferry to the island']] as const) {
      const event = envelopes.create(LogEventType.userMessage, { tenant: 'acme', sessionId, turnId: 't1', step: 1 }, { text });
      await js.publish(subjects.log('acme', sessionId), codec.encode(event));
    }
    const embedder = slowEmbedder();
    const memoryConnection = await connect({ servers: nats.server.url });
    const memory = await startMemoryService({ nc: memoryConnection, logger: silentLogger(), embedder, snapshots: false, queryEmbedTimeoutMs: 2_000 });
    try {
      await memory.caughtUp;
      await memory.vectorsIdle();
      expect(memory.vectors().state).toBe('on');
      const client = createMemoryClient({ nc: nats.nc, codec });

      // A query embedding that takes 1 s, a caller that waits 250 ms: the full-text hits come back in time.
      embedder.delayMs = 1_000;
      const started = performance.now();
      const slow = await client.search('acme', { query: 'kumquat', k: 3 }, { timeoutMs: 250 });
      expect(performance.now() - started).toBeLessThan(250);
      expect(slow.mode).toBe('full-text');
      expect(slow.note).toBe('full-text only: the query could not be embedded in time');
      expect(slow.hits.map((hit) => hit.sessionId)).toContain('fruit');

      // A fast embedder: the same budget fuses the vectors (and finds by meaning what shares no word).
      embedder.delayMs = 5;
      const fast = await client.search('acme', { query: 'citrus kumquat-like', k: 3 }, { timeoutMs: 250 });
      expect(fast.mode).toBe('hybrid');
      expect(fast.hits[0]?.sessionId).toBe('fruit');
    } finally {
      await memory.stop();
      await memoryConnection.close();
    }
  });
});
