import { describe, expect, it } from 'vitest';
import { INSERT_BACKLOG, createVectorThread } from '../../services/memory/vector-thread.ts';
import { silentLogger } from '../helpers/stack.ts';

// A backlog in the vector thread (vectors handed over faster than one usearch thread inserts them) is inserted on two
// threads: every vector gets in, and the graph finds the true nearest neighbours as well as one built slice by slice.

const DIMENSIONS = 32;

function randomVectors(count: number, seed: number): Float32Array[] {
  let state = seed;
  const uniform = () => (state = (state * 1_103_515_245 + 12_345) % 2_147_483_648) / 2_147_483_648;
  return Array.from({ length: count }, () => Float32Array.from({ length: DIMENSIONS }, () => uniform() + uniform() + uniform() - 1.5));
}

function cosine(a: Float32Array, b: Float32Array): number {
  let dot = 0;
  let na = 0;
  let nb = 0;
  for (let index = 0; index < a.length; index++) {
    dot += a[index]! * b[index]!;
    na += a[index]! * a[index]!;
    nb += b[index]! * b[index]!;
  }
  return dot / Math.sqrt(na * nb);
}

describe('vector thread backlog', () => {
  it('inserts a backlog past INSERT_BACKLOG on two threads and finds >= 95% of the true 10 nearest', async () => {
    const vectors = randomVectors(INSERT_BACKLOG * 4, 7);
    const queries = randomVectors(50, 99);
    const space = createVectorThread({ logger: silentLogger() });
    try {
      await space.ready;
      for (let start = 0; start < vectors.length; start += 256) {
        space.add('acme', DIMENSIONS, vectors.slice(start, start + 256).map((vector, offset) => ({ id: `s:${start + offset}:0`, type: 'user.message', vector })));
      }
      while (space.queued() > 0) await new Promise((resolve) => setTimeout(resolve, 20));
      let found = 0;
      for (const query of queries) {
        const truth = new Set(vectors.map((vector, index) => [cosine(query, vector), index] as const).sort((a, b) => b[0] - a[0]).slice(0, 10).map(([, index]) => `s:${index}:0`));
        for (const match of (await space.search('acme', query, 10, -1, undefined, 10_000)) ?? []) if (truth.has(match.id)) found += 1;
      }
      expect(found / (queries.length * 10)).toBeGreaterThanOrEqual(0.95);
    } finally {
      await space.close();
    }
  });
});
