import { describe, expect, it } from 'vitest';
import { AgentbusError } from '../../src/errors.ts';
import { createVectorizer } from '../../services/memory/vectorizer.ts';
import type { Embedder } from '../../services/memory/vectorizer.ts';
import { silentLogger } from '../helpers/stack.ts';

// The vector side of memory's index against a fake embedder: what a provider's failures do to the chunks waiting.

/** An embedder that fails as `fail` says for a batch, and records every batch it was asked. */
function fakeEmbedder(fail: (texts: string[], call: number) => AgentbusError | undefined): Embedder & { batches: string[][] } {
  const batches: string[][] = [];
  return {
    batches,
    async embed(texts) {
      batches.push(texts);
      const error = fail(texts, batches.length);
      if (error) throw error;
      return { model: 'fake', dimensions: 2, vectors: texts.map(() => [1, 0]) };
    },
  };
}

/** Batches of 4; one in flight at a time unless `concurrency` says more (the order of batches is then the test's to see). */
function vectorizerOf(embedder: Embedder, concurrency = 1) {
  const stored: string[] = [];
  const vectorizer = createVectorizer({ embedder, sink: async (_tenant, id) => (stored.push(id), true), logger: silentLogger(), batchSize: 4, retryMs: 5, concurrency });
  return { vectorizer, stored };
}

const chunks = (count: number) => Array.from({ length: count }, (_, index) => ({ id: `c${index}`, text: index === 2 ? 'far too long' : `chunk ${index}` }));

describe("memory's vectorizer", () => {
  it('sends a batch the provider refuses again chunk by chunk, and leaves only the refused chunk to full text', async () => {
    const embedder = fakeEmbedder((texts) => (texts.includes('far too long') ? new AgentbusError('bad_request', 'input too long', { retryable: false }) : undefined));
    const { vectorizer, stored } = vectorizerOf(embedder);
    vectorizer.enqueue('acme', chunks(6));
    await vectorizer.idle();
    expect(stored).toEqual(['c0', 'c1', 'c3', 'c4', 'c5']);
    expect(embedder.batches.map((batch) => batch.length)).toEqual([4, 1, 1, 1, 1, 2]);
    expect(vectorizer.status()).toMatchObject({ state: 'on' });
  });

  it('turns vectors off for a failure no retry mends (a key refused), instead of trying it for ever', async () => {
    const embedder = fakeEmbedder(() => new AgentbusError('unauthorized', 'openai: 401 invalid api key', { retryable: false }));
    const { vectorizer, stored } = vectorizerOf(embedder);
    vectorizer.enqueue('acme', chunks(3));
    await vectorizer.idle();
    expect(embedder.batches).toHaveLength(1);
    expect(stored).toEqual([]);
    expect(vectorizer.status()).toEqual({ state: 'off', reason: 'unauthorized: openai: 401 invalid api key' });
  });

  it('turns vectors off when the provider refuses every chunk of a batch one by one too (a gateway without the model)', async () => {
    const embedder = fakeEmbedder(() => new AgentbusError('bad_request', 'model text-embedding-3-small is not served here', { retryable: false }));
    const { vectorizer, stored } = vectorizerOf(embedder);
    vectorizer.enqueue('acme', chunks(6));
    await vectorizer.idle();
    expect(embedder.batches.map((batch) => batch.length)).toEqual([4, 1, 1, 1, 1]);
    expect(stored).toEqual([]);
    expect(vectorizer.status()).toMatchObject({ state: 'off', reason: expect.stringContaining('refused every chunk of a batch') });
  });

  it('tries an unexpected error again rather than turning vectors off (a reply it could not read)', async () => {
    const embedder = fakeEmbedder((_texts, call) => (call === 1 ? new AgentbusError('internal', 'answered 3 vectors for 4 inputs', { retryable: false }) : undefined));
    const { vectorizer, stored } = vectorizerOf(embedder);
    vectorizer.enqueue('acme', chunks(3));
    await vectorizer.idle();
    expect(stored).toEqual(['c0', 'c1', 'c2']);
    expect(vectorizer.status()).toMatchObject({ state: 'on' });
  });

  it('tries a failure that may pass again, with backoff, until it does', async () => {
    const embedder = fakeEmbedder((_texts, call) => (call <= 2 ? new AgentbusError('no_responders', 'no provider answers yet', { retryable: true }) : undefined));
    const { vectorizer, stored } = vectorizerOf(embedder);
    vectorizer.enqueue('acme', chunks(3));
    await vectorizer.idle();
    expect(embedder.batches).toHaveLength(3);
    expect(stored).toEqual(['c0', 'c1', 'c2']);
  });

  it('keeps up to its concurrency of batches in flight, and counts their chunks as pending', async () => {
    let open = 0;
    let most = 0;
    const release: Array<() => void> = [];
    const embedder: Embedder = {
      async embed(texts) {
        open += 1;
        most = Math.max(most, open);
        await new Promise<void>((resolve) => release.push(resolve));
        open -= 1;
        return { model: 'fake', dimensions: 2, vectors: texts.map(() => [1, 0]) };
      },
    };
    const { vectorizer, stored } = vectorizerOf(embedder, 3);
    vectorizer.enqueue('acme', chunks(20));
    await new Promise((resolve) => setTimeout(resolve, 10));
    expect(open).toBe(3);
    expect(vectorizer.pending()).toBe(20);
    const idle = vectorizer.idle();
    while (stored.length < 20) {
      release.splice(0).forEach((resolve) => resolve());
      await new Promise((resolve) => setTimeout(resolve, 1));
    }
    await idle;
    expect(most).toBe(3);
    expect(vectorizer.pending()).toBe(0);
    expect([...stored].sort()).toEqual(chunks(20).map((chunk) => chunk.id).sort());
  });

  it('sends a refused batch chunk by chunk while other batches are in flight, and stores every other chunk', async () => {
    const embedder = fakeEmbedder((texts) => (texts.includes('far too long') ? new AgentbusError('bad_request', 'input too long', { retryable: false }) : undefined));
    const { vectorizer, stored } = vectorizerOf(embedder, 4);
    vectorizer.enqueue('acme', chunks(10));
    await vectorizer.idle();
    expect([...stored].sort()).toEqual(['c0', 'c1', 'c3', 'c4', 'c5', 'c6', 'c7', 'c8', 'c9']);
    // The first three batches went together; the refused one then chunk by chunk.
    expect(embedder.batches.slice(0, 3).map((batch) => batch.length)).toEqual([4, 4, 2]);
    expect(embedder.batches.slice(3).map((batch) => batch.length)).toEqual([1, 1, 1, 1]);
    expect(vectorizer.status()).toMatchObject({ state: 'on' });
  });

  it('tries batches that failed in flight together again once, after the backoff', async () => {
    const embedder = fakeEmbedder((_texts, call) => (call <= 2 ? new AgentbusError('timeout', 'embed request ran past 30000 ms', { retryable: true }) : undefined));
    const { vectorizer, stored } = vectorizerOf(embedder, 4);
    vectorizer.enqueue('acme', chunks(8));
    await vectorizer.idle();
    expect([...stored].sort()).toEqual(chunks(8).map((chunk) => chunk.id).sort());
    expect(embedder.batches.map((batch) => batch.length)).toEqual([4, 4, 4, 4]);
  });
});
