import { Index, MetricKind, ScalarKind } from 'usearch';

/** One nearest neighbour: the chunk's id and its cosine similarity to the query. */
export interface VectorMatch {
  readonly id: string;
  readonly similarity: number;
}

/**
 * The vector side of a tenant's index: approximate nearest neighbours by cosine similarity, so that a search
 * costs about the logarithm of the index's size instead of a scan of every vector.
 */
export interface VectorIndex {
  /** The dimension every vector of it has. */
  readonly dimensions: number;
  /** Adds a vector, or replaces the one the id had. */
  set(id: string, vector: Float32Array): void;
  /** Adds (or replaces) many at once: one insert into the graph, on more than one thread. */
  setMany(entries: ReadonlyArray<{ readonly id: string; readonly vector: Float32Array }>): void;
  remove(id: string): void;
  has(id: string): boolean;
  /**
   * Up to `limit` ids whose similarity to the query is at least `floor`, best first, among those `accept` takes
   * (all when it is absent). Approximate: HNSW, exact only where a filter leaves too few candidates (below).
   */
  search(query: Float32Array, limit: number, floor: number, accept?: (id: string) => boolean): VectorMatch[];
  size(): number;
}

/** HNSW graph degree: 16 links per node, as hnswlib and usearch recommend for recall ≥ 0.95 at moderate cost. */
const CONNECTIVITY = 16;
/**
 * Candidates kept while inserting (ef_construction): 32 inserts in half the time of 64 at the same measured recall
 * (test/unit/memory-ann.test.ts; 20,000 hashed-feature vectors of 256 dimensions: 0.899 recall@10 either way).
 */
const EXPANSION_ADD = 32;
/** Candidates kept while searching (ef): above the deepest ranking fusion asks for (4 × 50). */
const EXPANSION_SEARCH = 256;
/**
 * How the graph stores its copy of each vector: half floats (the input stays Float32Array). usearch's distances over
 * them cost less per insert, which bounds memory's indexing with vectors: 164–237 µs of CPU an insert at 100,000
 * scripted-embedder vectors (256 dimensions) against 303–319 µs in single floats, at the same recall@10 against
 * brute force (0.769 / 0.761 either way, 200 queries; 0.871 / 0.873 at 30,000). Similarities differ from single
 * floats' by well under 0.001. The exact scan of a filtered search, and snapshots, use the full vectors kept beside
 * the graph.
 */
const QUANTIZATION = ScalarKind.F16;
/** The graph's settings, shared with the vector thread's graphs (vector-thread.ts). */
export const GRAPH_SETTINGS = { quantization: QUANTIZATION, connectivity: CONNECTIVITY, expansionAdd: EXPANSION_ADD, expansionSearch: EXPANSION_SEARCH } as const;
/** How many more neighbours a filtered search asks the graph for, before falling back to an exact scan. */
const FILTER_OVERSAMPLE = 8;

/**
 * A {@link VectorIndex} on usearch (an HNSW graph in C++, prebuilt for Node in its npm package). Keys are
 * numbers it hands out; the id ↔ key maps and the vectors themselves stay here, so a filtered search that the
 * graph cannot serve (a filter that leaves few candidates) falls back to an exact scan of the accepted ones.
 *
 * @example
 * const vectors = createVectorIndex(256);
 * vectors.set('s1:4:0', embedding);
 * const best = vectors.search(query, 20, 0.2);
 */
export function createVectorIndex(dimensions: number): VectorIndex {
  const graph = new Index({
    dimensions,
    metric: MetricKind.Cos,
    quantization: QUANTIZATION,
    connectivity: CONNECTIVITY,
    expansion_add: EXPANSION_ADD,
    expansion_search: EXPANSION_SEARCH,
    multi: false,
  });
  const keyOf = new Map<string, bigint>();
  const idOf = new Map<bigint, string>();
  const vectorOf = new Map<string, Float32Array>();
  let nextKey = 1n;

  const exact = (query: Float32Array, limit: number, floor: number, accept: (id: string) => boolean): VectorMatch[] => {
    const matches: VectorMatch[] = [];
    for (const [id, vector] of vectorOf) {
      if (!accept(id)) continue;
      const similarity = cosine(query, vector);
      if (similarity >= floor) matches.push({ id, similarity });
    }
    return matches.sort((a, b) => b.similarity - a.similarity).slice(0, limit);
  };

  return {
    dimensions,
    set(id, vector) {
      if (vector.length !== dimensions) throw new RangeError(`a vector of ${vector.length} dimensions in an index of ${dimensions}`);
      const old = keyOf.get(id);
      if (old !== undefined) {
        graph.remove(old);
        idOf.delete(old);
      }
      const key = nextKey++;
      graph.add(key, vector, 1);
      keyOf.set(id, key);
      idOf.set(key, id);
      vectorOf.set(id, vector);
    },
    setMany(entries) {
      if (entries.length === 0) return;
      const keys = new BigUint64Array(entries.length);
      const flat = new Float32Array(entries.length * dimensions);
      for (const [index, { id, vector }] of entries.entries()) {
        if (vector.length !== dimensions) throw new RangeError(`a vector of ${vector.length} dimensions in an index of ${dimensions}`);
        const old = keyOf.get(id);
        if (old !== undefined) {
          graph.remove(old);
          idOf.delete(old);
        }
        const key = nextKey++;
        keys[index] = key;
        flat.set(vector, index * dimensions);
        keyOf.set(id, key);
        idOf.set(key, id);
        vectorOf.set(id, vector);
      }
      // 0: usearch picks the thread count; inserts of one call run in parallel.
      graph.add(keys, flat, 0);
    },
    remove(id) {
      const key = keyOf.get(id);
      if (key === undefined) return;
      graph.remove(key);
      keyOf.delete(id);
      idOf.delete(key);
      vectorOf.delete(id);
    },
    has: (id) => keyOf.has(id),
    search(query, limit, floor, accept) {
      const size = keyOf.size;
      if (size === 0 || limit <= 0) return [];
      const wanted = accept ? Math.min(size, limit * FILTER_OVERSAMPLE) : Math.min(size, limit);
      const found = graph.search(query, wanted, 1);
      const matches: VectorMatch[] = [];
      let reachedFloor = false;
      for (let index = 0; index < found.keys.length && matches.length < limit; index++) {
        const id = idOf.get(found.keys[index]!);
        if (id === undefined) continue;
        const similarity = 1 - found.distances[index]!;
        if (similarity < floor) {
          reachedFloor = true;
          break;
        }
        if (!accept || accept(id)) matches.push({ id, similarity });
      }
      // A filter that took too few of the graph's candidates, while more lie above the floor: exact over what it accepts.
      if (accept && matches.length < limit && !reachedFloor && wanted < size) return exact(query, limit, floor, accept);
      return matches;
    },
    size: () => keyOf.size,
  };
}

/** Cosine similarity of two vectors of one dimension. */
export function cosine(a: Float32Array, b: Float32Array): number {
  let dot = 0;
  let normA = 0;
  let normB = 0;
  for (let index = 0; index < a.length; index++) {
    const x = a[index]!;
    const y = b[index]!;
    dot += x * y;
    normA += x * x;
    normB += y * y;
  }
  return normA === 0 || normB === 0 ? 0 : dot / Math.sqrt(normA * normB);
}
