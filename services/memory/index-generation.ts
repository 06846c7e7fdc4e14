import type { NatsConnection } from '@nats-io/nats-core';
import type { Logger } from '../../src/logging.ts';
import type { Codec, Subjects } from '../../src/protocol/index.ts';
import { followLog } from './log-follower.ts';
import type { LogFollower } from './log-follower.ts';
import { createMemoryStore } from './tenant-memory.ts';
import { createVectorThread } from './vector-thread.ts';
import type { ResourceLimits } from 'node:worker_threads';
import type { MemorySnapshot, MemoryStore } from './tenant-memory.ts';
import { createVectorizer } from './vectorizer.ts';
import type { Embedder, Vectorizer } from './vectorizer.ts';

/**
 * One build of memory's index: a store fed by its own log follower and vectorizer. A rebuild starts a new
 * generation beside the serving one and swaps them once it has caught up, so queries never see a half index.
 */
export interface IndexGeneration {
  readonly store: MemoryStore;
  readonly vectorizer: Vectorizer;
  /** Resolves once everything that was in the log at start is indexed (full-text; vectors may follow). */
  readonly caughtUp: Promise<void>;
  /** The last log sequence indexed. */
  lastSeq(): number;
  /** Events indexed since the generation started. */
  indexed(): number;
  /** A snapshot of what it holds, as of {@link lastSeq}. */
  snapshot(): MemorySnapshot;
  /** Drops a (deleted) session from the index, and what of it waits for vectors. */
  forget(tenant: string, sessionId: string): Promise<void>;
  stop(): void;
}

/** Options of {@link startGeneration}. */
export interface GenerationOptions {
  readonly nc: NatsConnection;
  readonly codec: Codec;
  readonly subjects: Subjects;
  readonly stream: string;
  readonly logger: Logger;
  readonly embedder: Embedder | undefined;
  /** Why there is no embedder, when there is none. */
  readonly fullTextReason?: string;
  /** The log stream's creation time, written into snapshots. */
  readonly logCreated: string;
  /** Where to start from instead of the log's beginning. */
  readonly snapshot?: MemorySnapshot;
  /** Whether a session was deleted: its events are not indexed, and a snapshot's entries of it are dropped. */
  readonly isDeleted?: (tenant: string, sessionId: string) => boolean;
  /** Hears each indexed event's sequence (for snapshot scheduling). */
  readonly onIndexed?: (seq: number) => void;
  /** Hears each chunk that got its vector (a snapshot is due for those too). */
  readonly onEmbedded?: () => void;
  readonly signal?: AbortSignal;
  /** Heap limits of the vector thread (tests: a thread that runs out of heap). */
  readonly vectorThreadLimits?: ResourceLimits;
}

/** Loads the snapshot (when given), then follows the log from after it. */
export async function startGeneration(options: GenerationOptions): Promise<IndexGeneration> {
  // Without an embedder no vector ever comes: no thread either.
  const vectors = options.embedder ? createVectorThread({ logger: options.logger, ...(options.vectorThreadLimits ? { resourceLimits: options.vectorThreadLimits } : {}) }) : undefined;
  const store = createMemoryStore(vectors);
  // Up before the generation serves: a search right after a start finds the thread there (a failure is logged, and search is full-text).
  await vectors?.ready;
  const vectorizer = createVectorizer({ embedder: options.embedder, ...(options.fullTextReason ? { offReason: options.fullTextReason } : {}), logger: options.logger, sink: async (tenant, id, vector) => {
      const stored = await store.setVector(tenant, id, vector);
      if (stored) options.onEmbedded?.();
      return stored;
    },
    sinkMany: async (tenant, entries) => {
      const stored = await store.setVectors(tenant, entries);
      for (let count = 0; count < stored; count++) options.onEmbedded?.();
      return stored;
    },
  });
  const isDeleted = options.isDeleted ?? (() => false);
  const forget = async (tenant: string, sessionId: string) => {
    vectorizer.drop(tenant, sessionId);
    await store.forget(tenant, sessionId);
  };
  if (options.snapshot) {
    for (const { tenant, chunks } of await store.restore(options.snapshot)) vectorizer.enqueue(tenant, chunks);
    // Sessions deleted after the snapshot was written.
    for (const { tenant, sessions } of options.snapshot.tenants) {
      for (const { sessionId } of sessions) if (isDeleted(tenant, sessionId)) await forget(tenant, sessionId);
    }
  }
  let indexed = 0;
  const follower: LogFollower = await followLog({
    nc: options.nc,
    codec: options.codec,
    subjects: options.subjects,
    stream: options.stream,
    logger: options.logger,
    afterSeq: options.snapshot?.seq ?? 0,
    ...(options.signal ? { signal: options.signal } : {}),
    onEvent: async (followed) => {
      indexed += 1;
      options.onIndexed?.(followed.seq);
      if (isDeleted(followed.tenant, followed.sessionId)) return;
      vectorizer.enqueue(followed.tenant, await store.add(followed));
      // Deleted while it was being added: the tombstone's forget may have run before this add finished.
      if (isDeleted(followed.tenant, followed.sessionId)) await forget(followed.tenant, followed.sessionId);
    },
  });
  return {
    store,
    vectorizer,
    caughtUp: follower.caughtUp,
    lastSeq: () => follower.lastSeq(),
    indexed: () => indexed,
    snapshot: () => store.snapshot(follower.lastSeq(), options.logCreated),
    forget,
    stop() {
      follower.stop();
      vectorizer.stop();
      void vectors?.close();
    },
  };
}
