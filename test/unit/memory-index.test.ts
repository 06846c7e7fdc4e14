import { describe, expect, it } from 'vitest';
import { createTenantIndex, fuseByReciprocalRank, RRF_K } from '../../services/memory/memory-index.ts';
import type { MemoryEntry } from '../../services/memory/memory-index.ts';

const entry = (sessionId: string, seq: number, text: string): MemoryEntry => ({ sessionId, seq, type: 'user.message', text, ts: 1_000 + seq });
/** A unit vector along one axis of four. */
const axis = (index: number) => Float32Array.from({ length: 4 }, (_, at) => (at === index ? 1 : 0));

describe('reciprocal rank fusion', () => {
  it('sums 1 / (60 + rank) over the rankings, so agreement beats one first place', () => {
    const fused = fuseByReciprocalRank([
      ['a', 'b', 'c'],
      ['b', 'd', 'e'],
    ]);
    expect(fused.map((item) => item.id)).toEqual(['b', 'a', 'd', 'c', 'e']);
    expect(fused[0]!.score).toBeCloseTo(1 / (RRF_K + 2) + 1 / (RRF_K + 1), 12);
    expect(fused.at(-1)!.score).toBeCloseTo(1 / (RRF_K + 3), 12);
  });
});

describe('a tenant index', () => {
  it('finds by vector what full-text misses, once chunks have vectors, and says whether it fused', async () => {
    const index = createTenantIndex();
    const [kumquat] = await index.add(entry('s1', 1, 'my favourite fruit is the kumquat'));
    const [boat] = await index.add(entry('s1', 2, 'the boat is moored in the harbour'));
    expect((await index.search({ query: 'citrus' })).hits).toEqual([]);
    await index.setVector(kumquat!.id, axis(0));
    await index.setVector(boat!.id, axis(1));
    expect(index.vectorCount()).toBe(2);
    const hybrid = await index.search({ query: 'citrus', k: 1 }, axis(0));
    expect(hybrid.hybrid).toBe(true);
    expect(hybrid.hits.map((hit) => hit.text)).toEqual(['my favourite fruit is the kumquat']);
    // A query vector of another dimension than the index's is not fused.
    expect((await index.search({ query: 'boat' }, Float32Array.from([1, 0]))).hybrid).toBe(false);
  });

  it('keeps vectors through chunks() and restore(), and forgets a session in both rankings', async () => {
    const index = createTenantIndex();
    const [first] = await index.add(entry('keep', 1, 'alpha beta'));
    await index.add(entry('drop', 2, 'alpha gamma'));
    await index.setVector(first!.id, axis(2));
    const copy = createTenantIndex();
    const pending = await copy.restore(index.chunks());
    expect(pending.map((chunk) => chunk.id)).toEqual(['drop:2:0']);
    expect(copy.vectorCount()).toBe(1);
    expect(Array.from(copy.chunks().find((chunk) => chunk.id === first!.id)!.vector!)).toEqual([0, 0, 1, 0]);
    await copy.forget('drop');
    expect((await copy.search({ query: 'alpha', k: 10 }, axis(2))).hits.map((hit) => hit.sessionId)).toEqual(['keep']);
    expect(copy.size()).toBe(1);
  });

  it('replaces what a redelivered event put there, and starts the vectors anew when their dimension changes', async () => {
    const index = createTenantIndex();
    const [chunk] = await index.add(entry('s', 7, 'one two'));
    await index.add(entry('s', 7, 'one two'));
    expect(index.size()).toBe(1);
    await index.setVector(chunk!.id, axis(0));
    await index.setVector(chunk!.id, Float32Array.from([0, 1]));
    expect(index.vectorCount()).toBe(1);
    expect(await index.setVector('s:99:0', axis(0))).toBe(false);
  });
});
