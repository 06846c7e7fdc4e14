import { jetstream } from '@nats-io/jetstream';
import type { NatsConnection } from '@nats-io/nats-core';
import type { Logger } from '../../src/logging.ts';
import { followBucket } from './bucket-follow.ts';

/**
 * Bytes of state per tenant: the sizes of its keys' current values, each key `<tenant>.<key>`. Every change is noted
 * with its revision (the bucket stream's sequence), so notes that come late or twice change nothing.
 */
export interface StateUsageBook {
  /** Bytes of the tenant's current values. */
  bytes(tenant: string): number;
  /** Bytes of the current value of a stored key (`<tenant>.<key>`); 0 when it has none. */
  sizeOf(storedKey: string): number;
  /** A value stored at `revision`; ignored when the key is known at that revision or a later one. */
  stored(storedKey: string, size: number, revision: number): void;
  /** The key deleted: at `revision` (from the bucket), or just now by this instance (no revision known yet). */
  deleted(storedKey: string, revision?: number): void;
}

/** The tenant of a stored key: its first token. */
const tenantOf = (storedKey: string) => storedKey.slice(0, Math.max(0, storedKey.indexOf('.')));

/**
 * The book of {@link StateUsageBook}, in memory. A key deleted by this instance keeps a zero-sized entry at its last
 * revision until the bucket's delete marker is heard: a put older than the delete, heard late, cannot bring it back.
 *
 * @example
 * const book = createStateUsageBook();
 * book.stored('acme.k', 100, 7);
 * book.bytes('acme'); // 100
 */
export function createStateUsageBook(): StateUsageBook {
  const entries = new Map<string, { size: number; revision: number }>();
  const totals = new Map<string, number>();
  const add = (tenant: string, delta: number) => {
    const total = (totals.get(tenant) ?? 0) + delta;
    if (total > 0) totals.set(tenant, total);
    else totals.delete(tenant);
  };
  return {
    bytes: (tenant) => totals.get(tenant) ?? 0,
    sizeOf: (storedKey) => entries.get(storedKey)?.size ?? 0,
    stored(storedKey, size, revision) {
      const known = entries.get(storedKey);
      if (known && known.revision >= revision) return;
      add(tenantOf(storedKey), size - (known?.size ?? 0));
      entries.set(storedKey, { size, revision });
    },
    deleted(storedKey, revision) {
      const known = entries.get(storedKey);
      if (!known) return;
      if (revision !== undefined && known.revision > revision) return;
      add(tenantOf(storedKey), -known.size);
      if (revision === undefined) entries.set(storedKey, { size: 0, revision: known.revision });
      else entries.delete(storedKey);
    },
  };
}

/** A {@link StateUsageBook} kept in step with the state bucket, whoever writes it. */
export interface StateUsage extends StateUsageBook {
  /** Resolves once every key the bucket held when watching began is counted. */
  readonly ready: Promise<void>;
  stop(): void;
}

/**
 * Follows the state bucket's stream (an ordered consumer, the last message of each key, headers only: sizes come from
 * `Nats-Msg-Size`, no value is read) into a {@link StateUsageBook}. Every memory instance hears every save and delete,
 * its own and the other instances', and a restarted one counts the bucket again from the start: the figures are right
 * across overwrites, deletes and restarts. What this instance stores is noted at once too ({@link StateUsage.stored}),
 * so its own next save sees it before the watch does.
 */
export async function watchStateUsage(options: { nc: NatsConnection; bucket: string; logger: Logger }): Promise<StateUsage> {
  const { nc, bucket, logger } = options;
  const lastSeq = (await (await jetstream(nc).jetstreamManager()).streams.info(`KV_${bucket}`)).state.last_seq;
  const book = createStateUsageBook();
  // The last sequence the watch has handed on: a note of this instance at or below it is already counted (or undone).
  let heard = 0;
  const follow = await followBucket({
    nc,
    bucket,
    lastSeq,
    deliver: 'last',
    logger,
    what: 'the state usage watch (tenant state quotas go by what this instance saw)',
    onEntry: ({ key, operation, seq, size }) => {
      if (operation === 'PUT') book.stored(key, size, seq);
      else book.deleted(key, seq);
      heard = seq;
    },
  });
  return {
    ready: follow.ready,
    bytes: book.bytes,
    sizeOf: book.sizeOf,
    stored(storedKey, size, revision) {
      if (revision > heard) book.stored(storedKey, size, revision);
    },
    deleted: (storedKey, revision) => book.deleted(storedKey, revision),
    stop: follow.stop,
  };
}
