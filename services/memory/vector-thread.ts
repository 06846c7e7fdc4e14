import { createRequire } from 'node:module';
import { Worker } from 'node:worker_threads';
import type { ResourceLimits } from 'node:worker_threads';
import type { Logger } from '../../src/logging.ts';
import type { MemoryEventType } from '../../src/protocol/index.ts';
import { GRAPH_SETTINGS, createVectorIndex } from './vector-index.ts';
import type { VectorIndex, VectorMatch } from './vector-index.ts';

/** A vector with what a filtered search needs to know of its chunk. */
export interface TypedVector {
  readonly id: string;
  readonly type: MemoryEventType;
  readonly vector: Float32Array;
}

/** What a filtered vector search keeps: a session's chunks, chunks of some types. */
export interface VectorFilter {
  readonly sessionId?: string;
  readonly types?: readonly MemoryEventType[];
}

/**
 * The vector side of every tenant's index, behind one door: inserts are queued (they return at once), searches
 * answer what the graph holds when they arrive. {@link createVectorThread} keeps the graphs in a thread of their own;
 * {@link createLocalVectors} in the caller's (tests, tools).
 */
export interface VectorSpace {
  /** Queues vectors of one tenant for the graph, all of `dimensions`; a tenant's graph of another dimension starts anew. */
  add(tenant: string, dimensions: number, entries: readonly TypedVector[]): void;
  remove(tenant: string, ids: readonly string[]): void;
  /** Drops a tenant's graph (its vectors came from another model). */
  reset(tenant: string): void;
  /**
   * Up to `limit` ids of the tenant whose similarity to the query is at least `floor`, best first, among those the
   * filter keeps; undefined when no answer came within `waitMs` or the vectors are unavailable (search by full text).
   */
  search(tenant: string, query: Float32Array, limit: number, floor: number, filter: VectorFilter | undefined, waitMs: number): Promise<VectorMatch[] | undefined>;
  /** Undefined while vectors can be searched; else why not (the thread failed). */
  failure(): string | undefined;
  /** Vectors handed over and not yet in a graph (inserted, or dropped as forgotten). */
  queued(): number;
  /** Resolves once the thread is up (usearch loaded) or failed: before it, a search waits for its start. */
  readonly ready: Promise<void>;
  /** Ends the thread, if there is one. */
  close(): Promise<void>;
}

/** Options of {@link createVectorThread}. */
export interface VectorThreadOptions {
  readonly logger: Logger;
  /** The thread's heap limits (a thread past them ends; searches go on by full text). */
  readonly resourceLimits?: ResourceLimits;
}

/** Vectors inserted into a graph at once in the thread: between two inserts a search that came meanwhile is answered. */
export const INSERT_SLICE = 8;

// Plain JavaScript run by the thread (as services/tools/line-scanner.ts does, so the compiled dist/ needs no file
// beside it): per tenant a usearch graph (HNSW) as in vector-index.ts, the id ↔ key maps, and the vectors for the
// exact scan of a filtered search the graph cannot serve. Inserts wait in a queue and go in slices of INSERT_SLICE,
// a turn of the thread's loop between slices: a search message is answered between two slices, never behind a batch.
const THREAD = `
const { parentPort, workerData } = require('node:worker_threads');
const { Index, MetricKind } = require(workerData.usearch);
const SLICE = workerData.slice;
const FILTER_OVERSAMPLE = 8;
const tenants = new Map();
const queue = [];
let draining = false;
// Vectors handed over and done with (inserted, or dropped as forgotten): the caller's count of those still queued.
let done = 0;

function graphOf(tenant, dimensions) {
  let found = tenants.get(tenant);
  if (found && found.dimensions !== dimensions) found = undefined;
  if (!found) {
    found = {
      dimensions,
      graph: new Index({ dimensions, metric: MetricKind.Cos, quantization: workerData.quantization, connectivity: workerData.connectivity, expansion_add: workerData.expansionAdd, expansion_search: workerData.expansionSearch, multi: false }),
      keyOf: new Map(), idOf: new Map(), vectorOf: new Map(), typeOf: new Map(), nextKey: 1n,
    };
    tenants.set(tenant, found);
  }
  return found;
}
function removeOne(space, id) {
  const key = space.keyOf.get(id);
  if (key === undefined) return;
  space.graph.remove(key);
  space.keyOf.delete(id);
  space.idOf.delete(key);
  space.vectorOf.delete(id);
  space.typeOf.delete(id);
}
function insertSlice() {
  const job = queue[0];
  const space = graphOf(job.tenant, job.dimensions);
  const end = Math.min(job.ids.length, job.next + SLICE);
  const kept = [];
  for (let at = job.next; at < end; at++) if (!job.gone || !job.gone.has(at)) kept.push(at);
  if (kept.length > 0) {
    const keys = new BigUint64Array(kept.length);
    const vectors = kept.length === end - job.next ? job.flat.subarray(job.next * job.dimensions, end * job.dimensions) : new Float32Array(kept.length * job.dimensions);
    for (const [index, at] of kept.entries()) {
      const id = job.ids[at];
      const vector = job.flat.subarray(at * job.dimensions, (at + 1) * job.dimensions);
      removeOne(space, id);
      const key = space.nextKey++;
      keys[index] = key;
      space.keyOf.set(id, key);
      space.idOf.set(key, id);
      space.vectorOf.set(id, vector);
      space.typeOf.set(id, job.types[at]);
      if (vectors.buffer !== job.flat.buffer) vectors.set(vector, index * job.dimensions);
    }
    // One thread: the service's own loop needs the other core, and a small slice keeps a search's wait short.
    space.graph.add(keys, vectors, 1);
  }
  done += end - job.next;
  job.next = end;
  if (job.next >= job.ids.length) {
    queue.shift();
    parentPort.postMessage({ op: 'done', done });
  }
}
function drain() {
  if (queue.length === 0) {
    draining = false;
    return;
  }
  insertSlice();
  setImmediate(drain);
}
function cosine(a, b) {
  let dot = 0, na = 0, nb = 0;
  for (let index = 0; index < a.length; index++) {
    dot += a[index] * b[index];
    na += a[index] * a[index];
    nb += b[index] * b[index];
  }
  return na === 0 || nb === 0 ? 0 : dot / Math.sqrt(na * nb);
}
function search({ tenant, query, limit, floor, filter }) {
  const space = tenants.get(tenant);
  const size = space ? space.keyOf.size : 0;
  if (!space || size === 0 || limit <= 0 || space.dimensions !== query.length) return [];
  const accept = filter
    ? (id) => (filter.sessionId === undefined || id.slice(0, id.indexOf(':')) === filter.sessionId) && (filter.types === undefined || filter.types.includes(space.typeOf.get(id)))
    : undefined;
  const wanted = accept ? Math.min(size, limit * FILTER_OVERSAMPLE) : Math.min(size, limit);
  const found = space.graph.search(query, wanted, 1);
  const matches = [];
  let reachedFloor = false;
  for (let index = 0; index < found.keys.length && matches.length < limit; index++) {
    const id = space.idOf.get(found.keys[index]);
    if (id === undefined) continue;
    const similarity = 1 - found.distances[index];
    if (similarity < floor) {
      reachedFloor = true;
      break;
    }
    if (!accept || accept(id)) matches.push({ id, similarity });
  }
  if (accept && matches.length < limit && !reachedFloor && wanted < size) {
    const exact = [];
    for (const [id, vector] of space.vectorOf) {
      if (!accept(id)) continue;
      const similarity = cosine(query, vector);
      if (similarity >= floor) exact.push({ id, similarity });
    }
    return exact.sort((a, b) => b.similarity - a.similarity).slice(0, limit);
  }
  return matches;
}
parentPort.on('message', (message) => {
  switch (message.op) {
    case 'add':
      queue.push({ tenant: message.tenant, dimensions: message.dimensions, ids: message.ids, types: message.types, flat: message.flat, next: 0 });
      if (!draining) {
        draining = true;
        setImmediate(drain);
      }
      break;
    case 'remove': {
      const gone = new Set(message.ids);
      const space = tenants.get(message.tenant);
      if (space) for (const id of gone) removeOne(space, id);
      // Those still queued are skipped when their slice comes.
      for (const job of queue) {
        if (job.tenant !== message.tenant) continue;
        for (let at = job.next; at < job.ids.length; at++) if (gone.has(job.ids[at])) (job.gone ??= new Set()).add(at);
      }
      break;
    }
    case 'reset':
      tenants.delete(message.tenant);
      for (let index = queue.length - 1; index >= 0; index--) {
        if (queue[index].tenant !== message.tenant) continue;
        done += queue[index].ids.length - queue[index].next;
        queue.splice(index, 1);
      }
      parentPort.postMessage({ op: 'done', done });
      break;
    case 'search': {
      const matches = search(message);
      parentPort.postMessage({ op: 'found', id: message.id, ids: matches.map((m) => m.id), similarities: matches.map((m) => m.similarity) });
      break;
    }
  }
});
parentPort.postMessage({ op: 'ready' });
`;

/**
 * The vector side in a thread of its own (node:worker_threads): usearch's graph inserts (HNSW, a few hundred µs
 * a vector at 100,000) and searches run there, so the service's own loop only reads the log, updates full text and
 * answers. Inserts are posted and return at once (the vectors' bytes are copied into one buffer and handed over,
 * not cloned); a search is posted and waited for at most `waitMs`, else it is answered by full text. When the thread
 * fails (an error, its heap limit) it is logged once, as an error, and every later search is full-text; a rebuild or
 * restart starts a new thread. The thread is unref'd and ended by {@link VectorSpace.close}.
 */
export function createVectorThread(options: VectorThreadOptions): VectorSpace {
  const { logger } = options;
  const worker = new Worker(THREAD, {
    eval: true,
    workerData: { usearch: createRequire(import.meta.url).resolve('usearch'), slice: INSERT_SLICE, ...GRAPH_SETTINGS },
    ...(options.resourceLimits ? { resourceLimits: options.resourceLimits } : {}),
  });
  worker.unref();
  let failed: string | undefined;
  let closing = false;
  let nextId = 0;
  let posted = 0;
  let done = 0;
  let markReady: () => void = () => undefined;
  const ready = new Promise<void>((resolve) => {
    markReady = resolve;
  });
  const waiting = new Map<number, { resolve: (matches: VectorMatch[] | undefined) => void; timer: NodeJS.Timeout }>();
  const settleAll = () => {
    for (const [id, { resolve, timer }] of waiting) {
      clearTimeout(timer);
      waiting.delete(id);
      resolve(undefined);
    }
  };
  const fail = (reason: string, err?: unknown) => {
    if (failed || closing) return;
    failed = reason;
    logger.error({ ...(err ? { err } : {}), reason }, 'the vector thread failed: memory searches by full text only until a restart or rebuild');
    settleAll();
    markReady();
  };
  worker.on('error', (err) => fail(`the vector thread failed: ${err.message}`, err));
  worker.on('exit', (code) => fail(`the vector thread ended (exit code ${code})`));
  worker.on('messageerror', (err) => fail(`a message of the vector thread could not be read: ${err.message}`, err));
  worker.on('message', (message: { op: string; id?: number; ids?: string[]; similarities?: number[]; done?: number }) => {
    if (message.op === 'ready') markReady();
    if (message.op === 'done') done = message.done!;
    if (message.op !== 'found' || message.id === undefined) return;
    const entry = waiting.get(message.id);
    if (!entry) return;
    waiting.delete(message.id);
    clearTimeout(entry.timer);
    entry.resolve(message.ids!.map((id, index) => ({ id, similarity: message.similarities![index]! })));
  });
  const post = (message: unknown, transfer?: ArrayBuffer[]) => {
    if (failed || closing) return false;
    try {
      worker.postMessage(message, transfer);
      return true;
    } catch (err) {
      fail(`posting to the vector thread failed: ${(err as Error).message}`, err);
      return false;
    }
  };
  return {
    add(tenant, dimensions, entries) {
      if (entries.length === 0) return;
      const flat = new Float32Array(entries.length * dimensions);
      const ids: string[] = [];
      const types: string[] = [];
      for (const [index, { id, type, vector }] of entries.entries()) {
        if (vector.length !== dimensions) throw new RangeError(`a vector of ${vector.length} dimensions in an index of ${dimensions}`);
        flat.set(vector, index * dimensions);
        ids.push(id);
        types.push(type);
      }
      if (post({ op: 'add', tenant, dimensions, ids, types, flat }, [flat.buffer as ArrayBuffer])) posted += ids.length;
    },
    remove(tenant, ids) {
      if (ids.length > 0) post({ op: 'remove', tenant, ids });
    },
    reset(tenant) {
      post({ op: 'reset', tenant });
    },
    search(tenant, query, limit, floor, filter, waitMs) {
      if (failed || closing || waitMs <= 0) return Promise.resolve(undefined);
      const id = nextId++;
      return new Promise((resolve) => {
        const timer = setTimeout(() => {
          waiting.delete(id);
          resolve(undefined);
        }, waitMs);
        waiting.set(id, { resolve, timer });
        if (!post({ op: 'search', id, tenant, query, limit, floor, ...(filter ? { filter } : {}) })) {
          clearTimeout(timer);
          waiting.delete(id);
          resolve(undefined);
        }
      });
    },
    failure: () => failed,
    queued: () => (failed ? 0 : posted - done),
    ready,
    async close() {
      if (closing) return;
      closing = true;
      settleAll();
      markReady();
      await worker.terminate();
    },
  };
}

/**
 * A {@link VectorSpace} in the caller's thread (one {@link createVectorIndex} per tenant): inserts at once, searches
 * at once. For tests and tools that hold an index without a service.
 */
export function createLocalVectors(): VectorSpace {
  const tenants = new Map<string, { index: VectorIndex; typeOf: Map<string, MemoryEventType> }>();
  return {
    add(tenant, dimensions, entries) {
      let found = tenants.get(tenant);
      if (!found || found.index.dimensions !== dimensions) tenants.set(tenant, (found = { index: createVectorIndex(dimensions), typeOf: new Map() }));
      found.index.setMany(entries);
      for (const { id, type } of entries) found.typeOf.set(id, type);
    },
    remove(tenant, ids) {
      const found = tenants.get(tenant);
      if (!found) return;
      for (const id of ids) {
        found.index.remove(id);
        found.typeOf.delete(id);
      }
    },
    reset(tenant) {
      tenants.delete(tenant);
    },
    async search(tenant, query, limit, floor, filter) {
      const found = tenants.get(tenant);
      if (!found || found.index.dimensions !== query.length) return [];
      const accept = filter
        ? (id: string) => (filter.sessionId === undefined || id.slice(0, id.indexOf(':')) === filter.sessionId) && (filter.types === undefined || filter.types.includes(found.typeOf.get(id)!))
        : undefined;
      return found.index.search(query, limit, floor, accept);
    },
    failure: () => undefined,
    queued: () => 0,
    ready: Promise.resolve(),
    close: async () => undefined,
  };
}
