import { createFullTextIndex } from './full-text-index.ts';
import type { MemoryEventType, MemoryHit, MemorySearchRequest } from '../../src/protocol/index.ts';
import { createLocalVectors } from './vector-thread.ts';
import type { VectorSpace } from './vector-thread.ts';

/** One logged event memory indexes. */
export interface MemoryEntry {
  readonly sessionId: string;
  readonly seq: number;
  readonly type: MemoryEventType;
  readonly text: string;
  readonly ts: number;
}

/** One indexed chunk of an entry, as a snapshot keeps it; `vector` once it was embedded. */
export interface IndexedChunk extends MemoryEntry {
  readonly id: string;
  readonly vector?: Float32Array;
}

/** A chunk whose text still waits for its embedding. */
export interface PendingChunk {
  readonly id: string;
  readonly text: string;
}

/** The searchable memory of one tenant: full-text (BM25) always, vectors for the chunks that have one. */
export interface TenantIndex {
  /** Indexes an entry (cut into chunks) for full-text search; returns the chunks, to be embedded. */
  add(entry: MemoryEntry): Promise<PendingChunk[]>;
  /**
   * Gives a chunk its embedding. A vector of another dimension than those before it (the embedding
   * model changed) starts the vector index anew: chunks embedded by the old model lose theirs.
   * Returns false when the chunk is gone (its session was forgotten meanwhile).
   */
  setVector(id: string, vector: Float32Array): Promise<boolean>;
  /** Gives many chunks their embeddings at once (see {@link TenantIndex.setVector}); returns how many were stored. */
  setVectors(entries: ReadonlyArray<{ readonly id: string; readonly vector: Float32Array }>): Promise<number>;
  /**
   * Full-text search, fused with vector search by reciprocal rank when `queryVector` is given, chunks have vectors
   * of its dimension, and the vector side answers within `vectorWaitMs` (default {@link VECTOR_SEARCH_WAIT_MS}).
   */
  search(request: MemorySearchRequest, queryVector?: Float32Array, vectorWaitMs?: number): Promise<{ hits: MemoryHit[]; hybrid: boolean }>;
  /** Drops every entry of a session. */
  forget(sessionId: string): Promise<void>;
  /** Every chunk, with its vector when it has one, for a snapshot. */
  chunks(): IndexedChunk[];
  /** Indexes chunks a snapshot kept (their vectors too); returns those without a vector. */
  restore(chunks: readonly IndexedChunk[]): Promise<PendingChunk[]>;
  /** Chunks indexed. */
  size(): number;
  /** Chunks that have a vector. */
  vectorCount(): number;
}

/** Longest text of one chunk; a longer event is cut into overlapping chunks of this size. */
export const CHUNK_CHARS = 1_200;
const CHUNK_OVERLAP = 200;
const DEFAULT_K = 5;
/** Reciprocal rank fusion's constant, as in Cormack et al. (2009) and the Oxydra design. */
export const RRF_K = 60;
/** Cosine similarity below which a chunk takes no part in the vector ranking. */
export const VECTOR_FLOOR = 0.2;
/** Vectors a restore inserts into the graph at once. */
const RESTORE_SLICE = 1_024;
/** How deep each ranking goes before fusion, as a multiple of k. */
const FUSION_DEPTH = 4;
/**
 * Longest wait for the vector side's answer (its own thread) before a search answers by full text alone, when the
 * caller's own wait is not known (the service otherwise waits what is left of it).
 */
export const VECTOR_SEARCH_WAIT_MS = 250;

/**
 * A tenant's index: full text (BM25, top k by MaxScore: {@link createFullTextIndex}) over every chunk, and an approximate nearest-neighbour graph
 * for vectors (HNSW) in `space` under the tenant's name: the service's vector thread ({@link createVectorThread}), or one in this thread
 * ({@link createLocalVectors}, the default). Its dimension is that of the first embedding (the model's). The vectors stay here too, for
 * snapshots. Each event's text is one chunk, or overlapping chunks of {@link CHUNK_CHARS} when longer; the chunks of one event share its sequence.
 */
export function createTenantIndex(space: VectorSpace = createLocalVectors(), tenant = 'default'): TenantIndex {
  // English stop words (the, is, my, …) take no part: each is in most messages, ranks nothing, and costs BM25 a
  // posting list as long as the index.
  const text = createFullTextIndex<StoredChunk>();
  let dimensions: number | undefined;
  const bySession = new Map<string, Set<string>>();
  const vectorOf = new Map<string, Float32Array>();
  const sessionOf = (id: string) => id.slice(0, id.indexOf(':'));

  const insertChunk = async (chunk: Omit<IndexedChunk, 'vector'>) => {
    let ids = bySession.get(chunk.sessionId);
    if (!ids) bySession.set(chunk.sessionId, (ids = new Set()));
    // A redelivered event (the follower started again before a snapshot covered it) replaces what it put there.
    if (ids.has(chunk.id)) await removeChunk(chunk.id);
    ids.add(chunk.id);
    text.add(chunk.id, chunk.text, { sessionId: chunk.sessionId, seq: chunk.seq, type: chunk.type, text: chunk.text, ts: chunk.ts });
  };
  const removeChunk = async (id: string) => {
    text.remove(id);
    if (vectorOf.delete(id)) space.remove(tenant, [id]);
  };
  const setVectors = async (entries: ReadonlyArray<{ readonly id: string; readonly vector: Float32Array }>): Promise<number> => {
    const kept: Array<{ id: string; type: MemoryEventType; vector: Float32Array }> = [];
    const flush = () => {
      if (kept.length > 0) space.add(tenant, dimensions!, kept.splice(0));
    };
    let stored = 0;
    for (const { id, vector } of entries) {
      const document = text.get(id);
      if (!document) continue;
      // Of another dimension than the graph's (the model changed): the graph starts anew, without the old model's vectors.
      if (dimensions !== vector.length) {
        flush();
        if (dimensions !== undefined) space.reset(tenant);
        dimensions = vector.length;
        vectorOf.clear();
      }
      kept.push({ id, type: document.type, vector });
      vectorOf.set(id, vector);
      stored += 1;
    }
    flush();
    return stored;
  };
  const setVector = async (id: string, vector: Float32Array): Promise<boolean> => (await setVectors([{ id, vector }])) === 1;

  return {
    async add(entry) {
      const pending: PendingChunk[] = [];
      for (const [index, piece] of chunks(entry.text).entries()) {
        const id = `${entry.sessionId}:${entry.seq}:${index}`;
        await insertChunk({ ...entry, id, text: piece });
        pending.push({ id, text: piece });
      }
      return pending;
    },
    setVector,
    setVectors,
    async search(request, queryVector, vectorWaitMs = VECTOR_SEARCH_WAIT_MS) {
      const k = request.k ?? DEFAULT_K;
      const filtered = request.sessionId !== undefined || request.types !== undefined;
      const acceptChunk = filtered ? (document: StoredChunk) => matches(document, request) : undefined;
      const hybrid = queryVector !== undefined && vectorOf.size > 0 && dimensions === queryVector.length && space.failure() === undefined;
      const fullText = text.search(request.query, hybrid ? k * FUSION_DEPTH : k, acceptChunk);
      // After the wait for the vector side a chunk may be gone (its session forgotten meanwhile): left out.
      const fullTextOnly = () => ({ hits: fullText.slice(0, k).flatMap((match) => { const document = text.get(match.id); return document ? [hitOf(document, match.score)] : []; }), hybrid: false });
      if (!hybrid) return fullTextOnly();
      // The floor keeps unrelated chunks out; fusion decides among the rest. The filter is applied by the vector side
      // (session from the id, type as stored with the vector); a chunk forgotten meanwhile is dropped below.
      const filter = filtered ? { ...(request.sessionId !== undefined ? { sessionId: request.sessionId } : {}), ...(request.types ? { types: request.types } : {}) } : undefined;
      const similar = await space.search(tenant, queryVector!, k * FUSION_DEPTH, VECTOR_FLOOR, filter, vectorWaitMs);
      // No answer in time (the vector thread busy or failed): the full-text hits.
      if (!similar) return fullTextOnly();
      const fused = fuseByReciprocalRank([fullText.map((match) => match.id), similar.map((match) => match.id)]);
      const hits: MemoryHit[] = [];
      for (const { id, score } of fused.slice(0, k)) {
        const document = text.get(id);
        if (document) hits.push(hitOf(document, score));
      }
      return { hits, hybrid: true };
    },
    async forget(sessionId) {
      const gone: string[] = [];
      for (const id of bySession.get(sessionId) ?? []) {
        text.remove(id);
        if (vectorOf.delete(id)) gone.push(id);
      }
      space.remove(tenant, gone);
      bySession.delete(sessionId);
    },
    chunks() {
      const all: IndexedChunk[] = [];
      for (const ids of bySession.values()) {
        for (const id of ids) {
          const document = text.get(id);
          if (!document) continue;
          const vector = vectorOf.get(id);
          all.push({ id, sessionId: document.sessionId, seq: document.seq, type: document.type, text: document.text, ts: document.ts, ...(vector ? { vector } : {}) });
        }
      }
      return all;
    },
    async restore(saved) {
      const pending: PendingChunk[] = [];
      const embedded: Array<{ id: string; vector: Float32Array }> = [];
      for (const chunk of saved) {
        if (sessionOf(chunk.id) !== chunk.sessionId) continue;
        await insertChunk(chunk);
        if (chunk.vector) embedded.push({ id: chunk.id, vector: chunk.vector });
        else pending.push({ id: chunk.id, text: chunk.text });
      }
      // The graph is built anew from the snapshot's vectors, in slices (the vector side inserts them in its own time).
      for (let start = 0; start < embedded.length; start += RESTORE_SLICE) await setVectors(embedded.slice(start, start + RESTORE_SLICE));
      return pending;
    },
    size: () => text.size(),
    vectorCount: () => vectorOf.size,
  };
}

interface StoredChunk {
  readonly sessionId: string;
  readonly seq: number;
  readonly type: MemoryEventType;
  readonly text: string;
  readonly ts: number;
}

/** Whether a chunk passes a search's filter (its session, its types). */
function matches(document: StoredChunk | undefined, request: MemorySearchRequest): boolean {
  if (!document) return false;
  if (request.sessionId !== undefined && document.sessionId !== request.sessionId) return false;
  return request.types === undefined || request.types.includes(document.type);
}

function hitOf(document: StoredChunk, score: number): MemoryHit {
  return { sessionId: String(document.sessionId), seq: document.seq, type: document.type, text: document.text, score, ts: document.ts };
}

/**
 * Reciprocal rank fusion: each ranking gives a document 1 / (RRF_K + rank), ranks from 1; the sums decide.
 * Ties keep the order of the first ranking that named the document.
 */
export function fuseByReciprocalRank(rankings: ReadonlyArray<readonly string[]>): Array<{ id: string; score: number }> {
  const scores = new Map<string, number>();
  for (const ranking of rankings) {
    ranking.forEach((id, index) => scores.set(id, (scores.get(id) ?? 0) + 1 / (RRF_K + index + 1)));
  }
  return [...scores].map(([id, score]) => ({ id, score })).sort((a, b) => b.score - a.score);
}

/** Cuts a text into overlapping chunks at white space where it can. */
export function chunks(text: string): string[] {
  if (text.length <= CHUNK_CHARS) return [text];
  const parts: string[] = [];
  for (let start = 0; start < text.length; ) {
    let end = Math.min(text.length, start + CHUNK_CHARS);
    if (end < text.length) {
      const space = text.lastIndexOf(' ', end);
      if (space > start + CHUNK_CHARS / 2) end = space;
    }
    parts.push(text.slice(start, end));
    if (end >= text.length) break;
    start = Math.max(start + 1, end - CHUNK_OVERLAP);
  }
  return parts;
}
