import { stopwords as englishStopwords } from '@orama/stopwords/english';

/** One match of a full-text search: the document's id and its BM25 score. */
export interface FullTextMatch {
  readonly id: string;
  readonly score: number;
}

/**
 * Full text over a tenant's chunks: an inverted index ranked by BM25 that finds the top k without scoring every
 * document holding a query word (MaxScore, below), so a search costs about the documents that can still enter the
 * top k, not every match. `T` is what it keeps per document (returned by {@link FullTextIndex.get}).
 */
export interface FullTextIndex<T> {
  /** Indexes a document's text under `id`, or replaces what the id had. */
  add(id: string, text: string, value: T): void;
  /** Drops a document; false when the id was not there. */
  remove(id: string): boolean;
  get(id: string): T | undefined;
  /** The best `k` documents for the query's words, best first, among those `accept` takes (all when absent). */
  search(query: string, k: number, accept?: (value: T) => boolean): FullTextMatch[];
  /** Every document, in the order they were added. */
  values(): IterableIterator<[string, T]>;
  size(): number;
}

/** BM25's term-frequency saturation and length normalization, as Lucene and Orama use. */
const K1 = 1.2;
const B = 0.75;
/** A posting list is compacted (its removed documents dropped) once they are this many more than its live ones. */
const COMPACT_SLACK = 32;
const STOP_WORDS: ReadonlySet<string> = new Set(englishStopwords);

/** The words of a text as the index knows them: lower case, split at anything not a letter or digit, stop words dropped. */
export function tokenize(text: string): string[] {
  const words: string[] = [];
  for (const word of text.toLowerCase().split(/[^\p{L}\p{N}]+/u)) if (word !== '' && !STOP_WORDS.has(word)) words.push(word);
  return words;
}

interface Posting {
  /** Document numbers, ascending (numbers are handed out in order, never twice), removed ones included until compaction. */
  docs: number[];
  tfs: number[];
  /** Live documents in it (the document frequency). */
  live: number;
  /** The highest term frequency it ever held: an upper bound of its score. */
  maxTf: number;
}

interface Stored<T> {
  readonly id: string;
  readonly value: T;
  readonly length: number;
  readonly terms: readonly string[];
}

/**
 * Creates a {@link FullTextIndex}. Search is document-at-a-time MaxScore (Turtle and Flood, 1995): the query's
 * words are ordered by the most they can add to a score; once the k-th best score so far exceeds what the weakest
 * words can add together, documents holding only those words are never looked at, and the others look them up by
 * a galloping search instead of walking their lists. The ranking is exactly BM25's top k.
 */
export function createFullTextIndex<T>(): FullTextIndex<T> {
  const docs: Array<Stored<T> | undefined> = [];
  const numOf = new Map<string, number>();
  const postings = new Map<string, Posting>();
  let totalLength = 0;

  const remove = (id: string): boolean => {
    const num = numOf.get(id);
    if (num === undefined) return false;
    const stored = docs[num]!;
    docs[num] = undefined;
    numOf.delete(id);
    totalLength -= stored.length;
    for (const term of stored.terms) {
      const posting = postings.get(term)!;
      posting.live -= 1;
      if (posting.live === 0) postings.delete(term);
      else if (posting.docs.length - posting.live > posting.live + COMPACT_SLACK) compact(posting);
    }
    return true;
  };
  const compact = (posting: Posting) => {
    const keptDocs: number[] = [];
    const keptTfs: number[] = [];
    for (let index = 0; index < posting.docs.length; index++) {
      if (docs[posting.docs[index]!] === undefined) continue;
      keptDocs.push(posting.docs[index]!);
      keptTfs.push(posting.tfs[index]!);
    }
    posting.docs = keptDocs;
    posting.tfs = keptTfs;
  };

  return {
    add(id, text, value) {
      remove(id);
      const words = tokenize(text);
      const counts = new Map<string, number>();
      for (const word of words) counts.set(word, (counts.get(word) ?? 0) + 1);
      const num = docs.length;
      docs.push({ id, value, length: words.length, terms: [...counts.keys()] });
      numOf.set(id, num);
      totalLength += words.length;
      for (const [term, tf] of counts) {
        let posting = postings.get(term);
        if (!posting) postings.set(term, (posting = { docs: [], tfs: [], live: 0, maxTf: 0 }));
        posting.docs.push(num);
        posting.tfs.push(tf);
        posting.live += 1;
        if (tf > posting.maxTf) posting.maxTf = tf;
      }
    },
    remove,
    get: (id) => {
      const num = numOf.get(id);
      return num === undefined ? undefined : docs[num]?.value;
    },
    search(query, k, accept) {
      const count = numOf.size;
      if (count === 0 || k <= 0) return [];
      const averageLength = totalLength / count || 1;
      const lists = [...new Set(tokenize(query))]
        .map((term) => postings.get(term))
        .filter((posting): posting is Posting => posting !== undefined)
        .map((posting) => {
          const idf = Math.log(1 + (count - posting.live + 0.5) / (posting.live + 0.5));
          // The most this word adds: its highest frequency in the shortest possible document.
          return { posting, idf, bound: (idf * posting.maxTf * (K1 + 1)) / (posting.maxTf + K1 * (1 - B)), at: 0 };
        })
        .sort((a, b) => a.bound - b.bound);
      if (lists.length === 0) return [];
      const reach: number[] = [];
      lists.reduce((sum, list, index) => (reach[index] = sum + list.bound), 0);
      const termScore = (list: (typeof lists)[number], tf: number, length: number) => (list.idf * tf * (K1 + 1)) / (tf + K1 * (1 - B + (B * length) / averageLength));

      const best = createTopK(k);
      // Lists before `essential` cannot lift a document into the top k on their own.
      let essential = 0;
      for (;;) {
        let candidate = Infinity;
        for (let index = essential; index < lists.length; index++) {
          const list = lists[index]!;
          if (list.at < list.posting.docs.length && list.posting.docs[list.at]! < candidate) candidate = list.posting.docs[list.at]!;
        }
        if (candidate === Infinity) break;
        const stored = docs[candidate];
        let score = 0;
        for (let index = essential; index < lists.length; index++) {
          const list = lists[index]!;
          if (list.posting.docs[list.at] !== candidate) continue;
          if (stored) score += termScore(list, list.posting.tfs[list.at]!, stored.length);
          list.at += 1;
        }
        if (!stored || (accept && !accept(stored.value))) continue;
        for (let index = essential - 1; index >= 0; index--) {
          if (score + reach[index]! <= best.threshold()) break;
          const list = lists[index]!;
          list.at = gallop(list.posting.docs, list.at, candidate);
          if (list.posting.docs[list.at] === candidate) score += termScore(list, list.posting.tfs[list.at]!, stored.length);
        }
        if (best.offer(candidate, score)) {
          while (essential < lists.length && reach[essential]! <= best.threshold()) essential += 1;
          if (essential === lists.length) break;
        }
      }
      return best.sorted().map(({ num, score }) => ({ id: docs[num]!.id, score }));
    },
    *values() {
      for (const stored of docs) if (stored) yield [stored.id, stored.value];
    },
    size: () => numOf.size,
  };
}

/** The first index at or after `from` whose number is ≥ `target` (the list's length when none is). */
function gallop(list: readonly number[], from: number, target: number): number {
  let step = 1;
  let low = from;
  let high = from;
  while (high < list.length && list[high]! < target) {
    low = high + 1;
    high += step;
    step *= 2;
  }
  high = Math.min(high, list.length);
  while (low < high) {
    const middle = (low + high) >>> 1;
    if (list[middle]! < target) low = middle + 1;
    else high = middle;
  }
  return low;
}

/** The k best (document, score) pairs offered: a min-heap; ties keep the earlier document. */
function createTopK(k: number) {
  const heap: Array<{ num: number; score: number }> = [];
  const below = (a: { num: number; score: number }, b: { num: number; score: number }) => a.score < b.score || (a.score === b.score && a.num > b.num);
  const swap = (i: number, j: number) => ([heap[i], heap[j]] = [heap[j]!, heap[i]!]);
  return {
    /** The score a document must beat to enter: the k-th best once there are k, else 0. */
    threshold: () => (heap.length < k ? 0 : heap[0]!.score),
    offer(num: number, score: number): boolean {
      if (score <= 0) return false;
      if (heap.length === k) {
        if (score <= heap[0]!.score) return false;
        heap[0] = { num, score };
        for (let at = 0; ; ) {
          const left = 2 * at + 1;
          const right = left + 1;
          let least = at;
          if (left < heap.length && below(heap[left]!, heap[least]!)) least = left;
          if (right < heap.length && below(heap[right]!, heap[least]!)) least = right;
          if (least === at) break;
          swap(at, least);
          at = least;
        }
        return true;
      }
      heap.push({ num, score });
      for (let at = heap.length - 1; at > 0; ) {
        const parent = (at - 1) >> 1;
        if (!below(heap[at]!, heap[parent]!)) break;
        swap(at, parent);
        at = parent;
      }
      return true;
    },
    sorted: () => [...heap].sort((a, b) => b.score - a.score || a.num - b.num),
  };
}
