import { Objm } from '@nats-io/obj';
import type { ObjectStore } from '@nats-io/obj';
import { StorageType } from '@nats-io/jetstream';
import type { NatsConnection } from '@nats-io/nats-core';
import type { Logger } from '../../src/logging.ts';
import { createCodec, streamNames } from '../../src/protocol/index.ts';
import type { MemorySnapshot } from './tenant-memory.ts';

/** The object store bucket that keeps memory's index snapshots. */
export const SNAPSHOT_BUCKET = streamNames().memory;
/** The name of the snapshot in it: one for every memory instance, since each indexes the same log. */
export const SNAPSHOT_NAME = 'index';
/** The snapshot format; another one is not read (the index is rebuilt from the log instead). */
export const SNAPSHOT_VERSION = 1;

/** Reads and writes the index snapshot, in the JetStream object store. */
export interface SnapshotStore {
  /** The snapshot, or undefined when there is none or it cannot be read (then memory reads the log from its start). */
  load(): Promise<MemorySnapshot | undefined>;
  /**
   * Stores a snapshot unless the stored one covers more of the log (another instance ahead of this one
   * wrote it). Returns whether it was stored.
   */
  save(snapshot: MemorySnapshot): Promise<boolean>;
  /** Deletes the snapshot (before a rebuild). */
  remove(): Promise<void>;
}

/** Options of {@link createSnapshotStore}. */
export interface SnapshotStoreOptions {
  readonly nc: NatsConnection;
  readonly logger: Logger;
  readonly bucket?: string;
  /** Copies of the store in a NATS cluster; default 1. */
  readonly replicas?: number;
}

/**
 * The snapshot store on the object store bucket {@link SNAPSHOT_BUCKET} (made when missing). A snapshot
 * is one msgpack object, chunked by the object store; its metadata names the log sequence it covers.
 */
export function createSnapshotStore(options: SnapshotStoreOptions): SnapshotStore {
  const { logger } = options;
  // A snapshot is far larger than a bus message: no payload bound on it.
  const codec = createCodec({ maxPayload: Number.MAX_SAFE_INTEGER });
  const bucket = options.bucket ?? SNAPSHOT_BUCKET;
  let opened: Promise<ObjectStore> | undefined;
  const store = () =>
    (opened ??= new Objm(options.nc).create(bucket, { storage: StorageType.File, replicas: options.replicas ?? 1, description: 'agentbus memory: index snapshots' }).catch((err: unknown) => {
      opened = undefined;
      throw err;
    }));
  const storedSeq = async (objects: ObjectStore) => {
    const info = await objects.info(SNAPSHOT_NAME);
    return info && !info.deleted ? Number(info.metadata?.['seq'] ?? 0) : 0;
  };
  return {
    async load() {
      try {
        const bytes = await (await store()).getBlob(SNAPSHOT_NAME);
        if (!bytes) return undefined;
        const snapshot = codec.decode(bytes) as Partial<MemorySnapshot> | undefined;
        if (snapshot?.v !== SNAPSHOT_VERSION || typeof snapshot.seq !== 'number' || !Array.isArray(snapshot.tenants)) {
          logger.warn({ bucket, version: snapshot?.v }, 'ignored a memory snapshot of another format; reading the log instead');
          return undefined;
        }
        return snapshot as MemorySnapshot;
      } catch (err) {
        logger.warn({ err, bucket }, 'could not read the memory snapshot; reading the log instead');
        return undefined;
      }
    },
    async save(snapshot) {
      const objects = await store();
      if ((await storedSeq(objects)) >= snapshot.seq) return false;
      await objects.putBlob({ name: SNAPSHOT_NAME, metadata: { seq: String(snapshot.seq), version: String(SNAPSHOT_VERSION) } }, codec.encode(snapshot));
      return true;
    },
    async remove() {
      const objects = await store();
      if (await objects.info(SNAPSHOT_NAME)) await objects.delete(SNAPSHOT_NAME);
    },
  };
}
