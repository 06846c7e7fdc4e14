import { describe, expect, it } from 'vitest';
import { cosine, createVectorIndex } from '../../services/memory/vector-index.ts';
import { createTenantIndex } from '../../services/memory/memory-index.ts';

// The vector side of memory's index is an HNSW graph (usearch): approximate, so its answers are checked against
// brute force on the same vectors.

/** Deterministic normal-ish random numbers (a sum of uniforms from a small LCG). */
function randomVectors(count: number, dimensions: number, seed: number): Float32Array[] {
  let state = seed >>> 0;
  const uniform = () => {
    state = (Math.imul(state, 1_664_525) + 1_013_904_223) >>> 0;
    return state / 2 ** 32;
  };
  return Array.from({ length: count }, () => Float32Array.from({ length: dimensions }, () => uniform() + uniform() + uniform() - 1.5));
}

function bruteForce(vectors: readonly Float32Array[], query: Float32Array, k: number, accept: (index: number) => boolean = () => true): number[] {
  return vectors
    .map((vector, index) => ({ index, similarity: cosine(vector, query) }))
    .filter(({ index }) => accept(index))
    .sort((a, b) => b.similarity - a.similarity)
    .slice(0, k)
    .map(({ index }) => index);
}

describe('memory vector index (HNSW)', () => {
  it('finds at least 95% of the true 10 nearest neighbours of random vectors', () => {
    const dimensions = 32;
    const vectors = randomVectors(5_000, dimensions, 7);
    const queries = randomVectors(100, dimensions, 99);
    const index = createVectorIndex(dimensions);
    // Half one by one, half in multi-threaded inserts of 256, as the vectorizer's batches go in.
    vectors.slice(0, 2_500).forEach((vector, at) => index.set(`v${at}`, vector));
    for (let start = 2_500; start < 5_000; start += 256) index.setMany(vectors.slice(start, start + 256).map((vector, offset) => ({ id: `v${start + offset}`, vector })));
    expect(index.size()).toBe(5_000);
    let found = 0;
    for (const query of queries) {
      const truth = new Set(bruteForce(vectors, query, 10).map((at) => `v${at}`));
      for (const match of index.search(query, 10, -1)) if (truth.has(match.id)) found += 1;
    }
    expect(found / (queries.length * 10)).toBeGreaterThanOrEqual(0.95);
  });

  it('answers a filtered search exactly when the filter leaves few candidates, and never returns one it refuses', () => {
    const dimensions = 16;
    const vectors = randomVectors(3_000, dimensions, 3);
    const index = createVectorIndex(dimensions);
    vectors.forEach((vector, at) => index.set(`v${at}`, vector));
    const accepted = (at: number) => at % 97 === 0;
    for (const query of randomVectors(10, dimensions, 5)) {
      const matches = index.search(query, 5, -1, (id) => accepted(Number(id.slice(1))));
      expect(matches.map((match) => match.id)).toEqual(bruteForce(vectors, query, 5, accepted).map((at) => `v${at}`));
    }
  });

  it('forgets removed vectors, replaces a vector given again, and keeps out those under the floor', () => {
    const index = createVectorIndex(3);
    index.set('a', Float32Array.from([1, 0, 0]));
    index.set('b', Float32Array.from([0, 1, 0]));
    index.set('c', Float32Array.from([0.9, 0.1, 0]));
    expect(index.search(Float32Array.from([1, 0, 0]), 3, 0.5).map((match) => match.id)).toEqual(['a', 'c']);
    index.remove('a');
    index.set('b', Float32Array.from([1, 0.01, 0]));
    expect(index.has('a')).toBe(false);
    expect(index.size()).toBe(2);
    expect(index.search(Float32Array.from([1, 0, 0]), 3, 0.5).map((match) => match.id)).toEqual(['b', 'c']);
    expect(() => index.set('d', Float32Array.from([1, 0]))).toThrow(RangeError);
  });

  it('ranks a tenant by vectors through the graph in hybrid search, with filters kept', async () => {
    const tenant = createTenantIndex();
    const texts = ['kumquats are my favourite fruit', 'the deploy failed on friday', 'lunch was soup'];
    for (const [at, text] of texts.entries()) {
      const [chunk] = await tenant.add({ sessionId: `s${at}`, seq: at + 1, type: 'user.message', text, ts: at });
      await tenant.setVector(chunk!.id, Float32Array.from([at === 0 ? 1 : 0, at === 1 ? 1 : 0, at === 2 ? 1 : 0]));
    }
    // No shared word with the query: only the vector side can find it.
    const { hits, hybrid } = await tenant.search({ query: 'citrus', k: 2 }, Float32Array.from([1, 0.1, 0]));
    expect(hybrid).toBe(true);
    expect(hits[0]?.sessionId).toBe('s0');
    const filtered = await tenant.search({ query: 'citrus', k: 2, sessionId: 's1' }, Float32Array.from([1, 0.1, 0]));
    expect(filtered.hits.every((hit) => hit.sessionId === 's1')).toBe(true);
  });
});
