import type { MemoryHit, MemorySearchRequest, SessionsListReply, SessionsListRequest } from '../../src/protocol/index.ts';
import { LogEventType } from '../../src/protocol/index.ts';
import { indexedText } from './log-follower.ts';
import type { FollowedEvent } from './log-follower.ts';
import { createTenantIndex } from './memory-index.ts';
import type { IndexedChunk, PendingChunk, TenantIndex } from './memory-index.ts';
import { createSessionCatalog } from './session-catalog.ts';
import { createLocalVectors } from './vector-thread.ts';
import type { VectorSpace } from './vector-thread.ts';
import type { CatalogEntry, SessionCatalog } from './session-catalog.ts';

/** One chunk as a snapshot stores it: `[id, sessionId, seq, type, text, ts, vector bytes or null]`. */
export type SnapshotChunk = [string, string, number, string, string, number, Uint8Array | null];

/** Everything memory holds, as of a log sequence: what a restart loads instead of reading the log again. */
export interface MemorySnapshot {
  readonly v: 1;
  /** The last log sequence whose event is in it. */
  readonly seq: number;
  /** The creation time of the log stream it was read from (see `LogStreamInfo.created`). */
  readonly logCreated: string;
  readonly createdAt: number;
  readonly tenants: ReadonlyArray<{ readonly tenant: string; readonly chunks: readonly SnapshotChunk[]; readonly sessions: readonly CatalogEntry[] }>;
}

/** Everything memory holds, kept apart per tenant: no query of one tenant ever reads another's. */
export interface MemoryStore {
  /** Indexes one log event into its tenant's index and catalog; returns the chunks to embed. */
  add(followed: FollowedEvent): Promise<PendingChunk[]>;
  setVector(tenant: string, id: string, vector: Float32Array): Promise<boolean>;
  /** Gives many chunks of a tenant their vectors at once; returns how many were stored (the others are gone). */
  setVectors(tenant: string, entries: ReadonlyArray<{ readonly id: string; readonly vector: Float32Array }>): Promise<number>;
  /** See {@link TenantIndex.search}. */
  search(tenant: string, request: MemorySearchRequest, queryVector?: Float32Array, vectorWaitMs?: number): Promise<{ hits: MemoryHit[]; hybrid: boolean }>;
  listSessions(tenant: string, request: SessionsListRequest): SessionsListReply;
  /** The log sequence of a session's own newest `turn.started` indexed so far, if any. */
  lastTurnStart(tenant: string, sessionId: string): number | undefined;
  /** Drops a session from its tenant's index and catalog. */
  forget(tenant: string, sessionId: string): Promise<void>;
  /** Whether a tenant has chunks with vectors and they can be searched (a query is worth embedding). */
  hasVectors(tenant: string): boolean;
  /** Undefined while vectors can be searched; else why not (the vector thread failed). */
  vectorFailure(): string | undefined;
  /** Vectors handed to the vector thread and not yet in its graphs. */
  vectorsQueued(): number;
  snapshot(seq: number, logCreated: string): MemorySnapshot;
  /** Loads a snapshot into this (empty) store; returns, per tenant, the chunks that still want a vector. */
  restore(snapshot: MemorySnapshot): Promise<Array<{ tenant: string; chunks: PendingChunk[] }>>;
  /** Chunks indexed, over all tenants. */
  size(): number;
  /** Chunks with a vector, over all tenants. */
  vectorCount(): number;
}

interface Tenant {
  readonly index: TenantIndex;
  readonly catalog: SessionCatalog;
}

/**
 * Creates the per-tenant store: an index and a session catalog per tenant, made on its first event. Every tenant's
 * vectors go to `vectors` (the service's vector thread; default a space in this thread).
 */
export function createMemoryStore(vectors: VectorSpace = createLocalVectors()): MemoryStore {
  const tenants = new Map<string, Tenant>();
  const tenantOf = (tenant: string): Tenant => {
    let found = tenants.get(tenant);
    if (!found) {
      found = { index: createTenantIndex(vectors, tenant), catalog: createSessionCatalog() };
      tenants.set(tenant, found);
    }
    return found;
  };
  return {
    async add({ tenant, sessionId, seq, event }) {
      const { index, catalog } = tenantOf(tenant);
      const answer = event.type === LogEventType.assistantMessage ? event.data.text : event.type === LogEventType.turnEnded ? event.data.text : undefined;
      catalog.note({
        sessionId,
        seq,
        type: event.type,
        ts: event.ts,
        ...(event.type === LogEventType.turnEnded ? { cost: event.data.cost } : {}),
        ...(answer ? { text: answer } : {}),
        ...(event.type === LogEventType.turnStarted && event.turnId ? { startedTurn: event.turnId } : {}),
        ...(event.type === LogEventType.sessionForked ? { forkedFrom: { sessionId: event.data.parentSessionId, seq: event.data.parentSeq } } : {}),
      });
      const indexed = indexedText(event);
      return indexed ? index.add({ sessionId, seq, type: indexed.type, text: indexed.text, ts: event.ts }) : [];
    },
    async setVector(tenant, id, vector) {
      const found = tenants.get(tenant);
      return found ? found.index.setVector(id, vector) : false;
    },
    async setVectors(tenant, entries) {
      const found = tenants.get(tenant);
      return found ? found.index.setVectors(entries) : 0;
    },
    async search(tenant, request, queryVector, vectorWaitMs) {
      const found = tenants.get(tenant);
      return found ? found.index.search(request, queryVector, vectorWaitMs) : { hits: [], hybrid: false };
    },
    listSessions(tenant, request) {
      return tenants.get(tenant)?.catalog.list(request) ?? { sessions: [] };
    },
    lastTurnStart(tenant, sessionId) {
      return tenants.get(tenant)?.catalog.lastTurnStart(sessionId);
    },
    async forget(tenant, sessionId) {
      const found = tenants.get(tenant);
      if (!found) return;
      await found.index.forget(sessionId);
      found.catalog.forget(sessionId);
    },
    hasVectors: (tenant) => vectors.failure() === undefined && (tenants.get(tenant)?.index.vectorCount() ?? 0) > 0,
    vectorFailure: () => vectors.failure(),
    vectorsQueued: () => vectors.queued(),
    snapshot(seq, logCreated) {
      return {
        v: 1,
        seq,
        logCreated,
        createdAt: Date.now(),
        tenants: [...tenants].map(([tenant, { index, catalog }]) => ({
          tenant,
          chunks: index.chunks().map(snapshotChunkOf),
          sessions: catalog.entries(),
        })),
      };
    },
    async restore(snapshot) {
      const pending: Array<{ tenant: string; chunks: PendingChunk[] }> = [];
      for (const saved of snapshot.tenants) {
        const { index, catalog } = tenantOf(saved.tenant);
        catalog.restore(saved.sessions);
        pending.push({ tenant: saved.tenant, chunks: await index.restore(saved.chunks.map(indexedChunkOf)) });
      }
      return pending;
    },
    size: () => [...tenants.values()].reduce((sum, tenant) => sum + tenant.index.size(), 0),
    vectorCount: () => [...tenants.values()].reduce((sum, tenant) => sum + tenant.index.vectorCount(), 0),
  };
}

function snapshotChunkOf(chunk: IndexedChunk): SnapshotChunk {
  const vector = chunk.vector ? new Uint8Array(chunk.vector.buffer, chunk.vector.byteOffset, chunk.vector.byteLength) : null;
  return [chunk.id, chunk.sessionId, chunk.seq, chunk.type, chunk.text, chunk.ts, vector];
}

function indexedChunkOf([id, sessionId, seq, type, text, ts, vector]: SnapshotChunk): IndexedChunk {
  // Copied: the decoded bytes may sit at an offset a Float32Array cannot start at.
  const floats = vector ? new Float32Array(Uint8Array.from(vector).buffer) : undefined;
  return { id, sessionId, seq, type: type as IndexedChunk['type'], text, ts, ...(floats ? { vector: floats } : {}) };
}
