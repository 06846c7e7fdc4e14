import { describe, expect, it } from 'vitest';
import { createFullTextIndex, tokenize } from '../../services/memory/full-text-index.ts';

// The full-text index's top k (MaxScore, which skips documents that cannot enter it) must be exactly BM25's top k:
// checked against scoring every document.

/** A deterministic number in [0, 1). */
function unit(index: number, salt: number): number {
  const x = Math.sin(index * 12.9898 + salt * 78.233) * 43_758.5453;
  return x - Math.floor(x);
}
/** A word of a 300-word vocabulary, the low ranks far more often (as in text). */
const word = (random: number) => `w${Math.floor(300 * random ** 3)}`;
const text = (index: number) => Array.from({ length: 3 + (index % 20) }, (_, at) => word(unit(index, at))).join(' ');

/** BM25 of every document, the plain way. */
function bruteForce(documents: Map<string, string>, query: string, k: number, accept: (id: string) => boolean = () => true) {
  const tokens = new Map([...documents].map(([id, body]) => [id, tokenize(body)]));
  const count = tokens.size;
  const average = [...tokens.values()].reduce((sum, words) => sum + words.length, 0) / count;
  const df = new Map<string, number>();
  for (const words of tokens.values()) for (const term of new Set(words)) df.set(term, (df.get(term) ?? 0) + 1);
  const scores: Array<{ id: string; score: number }> = [];
  for (const [id, words] of tokens) {
    let score = 0;
    for (const term of new Set(tokenize(query))) {
      const tf = words.filter((other) => other === term).length;
      if (tf === 0) continue;
      const idf = Math.log(1 + (count - df.get(term)! + 0.5) / (df.get(term)! + 0.5));
      score += (idf * tf * 2.2) / (tf + 1.2 * (0.25 + (0.75 * words.length) / average));
    }
    if (score > 0 && accept(id)) scores.push({ id, score });
  }
  return scores.sort((a, b) => b.score - a.score).slice(0, k);
}

describe('full-text index (BM25, top k by MaxScore)', () => {
  it('tokenizes to lower-case words without stop words or punctuation', () => {
    expect(tokenize('My favourite fruit is the Kumquat. lighthouse-3')).toEqual(['favourite', 'fruit', 'kumquat', 'lighthouse', '3']);
  });

  it('ranks as scoring every document does, after removals and replacements, with and without a filter', () => {
    const index = createFullTextIndex<{ even: boolean }>();
    const documents = new Map<string, string>();
    for (let doc = 0; doc < 1_500; doc++) {
      index.add(`d${doc}`, text(doc), { even: doc % 2 === 0 });
      documents.set(`d${doc}`, text(doc));
    }
    for (let doc = 0; doc < 1_500; doc += 3) {
      index.remove(`d${doc}`);
      documents.delete(`d${doc}`);
    }
    for (let doc = 1; doc < 1_500; doc += 7) {
      index.add(`d${doc}`, text(doc + 5_000), { even: doc % 2 === 0 });
      documents.set(`d${doc}`, text(doc + 5_000));
    }
    expect(index.size()).toBe(documents.size);
    for (let q = 0; q < 40; q++) {
      const query = Array.from({ length: 1 + (q % 4) }, (_, at) => word(unit(q + 900, at))).join(' ');
      const k = 1 + (q % 10);
      const expected = bruteForce(documents, query, k);
      const found = index.search(query, k);
      expect(found.map((match) => match.score)).toEqual(expected.map((match) => expect.closeTo(match.score, 9)));
      // Documents tied with the k-th may be either: those above it must be the same.
      const above = (matches: ReadonlyArray<{ id: string; score: number }>) => new Set(matches.filter((match) => match.score > expected.at(-1)!.score + 1e-9).map((match) => match.id));
      if (expected.length > 0) expect(above(found)).toEqual(above(expected));
      const filtered = index.search(query, k, (value) => value.even);
      const expectedFiltered = bruteForce(documents, query, k, (id) => Number(id.slice(1)) % 2 === 0);
      expect(filtered.map((match) => match.score)).toEqual(expectedFiltered.map((match) => expect.closeTo(match.score, 9)));
    }
  });

  it('finds nothing for words it does not hold, and forgets what was removed', () => {
    const index = createFullTextIndex<string>();
    index.add('a', 'my favourite fruit is the kumquat', 'a');
    index.add('b', 'we took the ferry', 'b');
    expect(index.search('ficus plant', 5)).toEqual([]);
    expect(index.search('the', 5)).toEqual([]);
    expect(index.search('kumquat ferry', 5).map((match) => match.id).sort()).toEqual(['a', 'b']);
    expect(index.remove('a')).toBe(true);
    expect(index.remove('a')).toBe(false);
    expect(index.search('kumquat', 5)).toEqual([]);
    expect(index.get('a')).toBeUndefined();
    expect([...index.values()]).toEqual([['b', 'b']]);
  });
});
