import { Bucket } from '@nats-io/kv';
import type { KV } from '@nats-io/kv';
import type { Logger } from '../../../src/logging.ts';
import { withTimeout } from '../../../src/with-timeout.ts';
import { isPermissionDenied } from '../../../src/bus/permission-denied.ts';
import { TimeoutError } from '../../../src/errors.ts';

/**
 * Removes a lease key's messages up to and including stream sequence `seq` (its delete marker), leaving nothing
 * behind; a newer write of the key (another node's claim, past `seq`) stays.
 */
export type DeleteMarkerRemoval = (key: string, seq: number) => Promise<void>;

/**
 * The {@link DeleteMarkerRemoval} of a nats.js KV bucket: a stream purge filtered to the key's subject, up to the
 * sequence after `seq` (`$JS.API.STREAM.PURGE.<stream>`, as for release markers: `marker-stream.ts`).
 */
export function deleteMarkerRemoval(kv: KV): DeleteMarkerRemoval {
  if (!(kv instanceof Bucket)) throw new TypeError('lease delete markers need a nats.js KV bucket');
  const bucket = kv;
  return async (key, seq) => {
    await bucket.jsm.streams.purge(bucket.stream, { filter: bucket.fullKeyName(bucket.encodeKey(key)), seq: seq + 1 });
  };
}

/** How long a delete marker stays before it is compacted: watchers (the dashboard's) must have seen it. */
const COMPACT_AFTER_MS = 60_000;
/** Delete markers of this node's own writes compacted per pass, at most, and purges in flight at once. */
const OWN_PER_PASS = 1_024;
const PURGES_AT_ONCE = 16;
/** Delete markers found by a full read (other nodes', earlier versions') compacted per pass, at most. */
const FOUND_PER_PASS = 64;
/** Delete markers kept to compact, at most, in each list; past it they are found again by a full read. */
const MAX_KEPT = 10_000;

/** A delete (or purge) marker of a lease key: its stream sequence, and when it was written (ms). */
interface DeleteMarker {
  readonly key: string;
  readonly seq: number;
  readonly at: number;
}

/**
 * The delete markers of leases, compacted. A lease released idle is deleted (by compare-and-set), and a deleted
 * session's lease purged, which each leave one marker message in the stream for good; a stream purge would leave
 * nothing, but emits nothing either, and the dashboard's watch drops a held lease on its delete. So the delete
 * marker is written first, and purged from the stream `compactAfterMs` later, up to its own sequence only: a claim
 * written since (by any node) is past it and stays. The node that wrote a marker knows its sequence and compacts it
 * itself; markers it could not (it stopped or died first, or an earlier version wrote them) are found by the next
 * full read of the bucket (`orphan-scan.ts`) and compacted a few per pass by whichever nodes read them.
 */
export interface LeaseDeleteMarkers {
  /** A delete or purge marker this node wrote just now at stream sequence `seq`. */
  wrote(key: string, seq: number): void;
  /** A delete or purge marker found in the bucket, written at `at` (ms, the server's time). */
  found(key: string, seq: number, at: number): void;
  /** Purges the markers due: this node's own (up to 1,024 a pass) and found ones (up to 64). No I/O when none is due. */
  compact(): Promise<void>;
  /** Markers waiting here: this node's own, and found ones. */
  size(): { readonly own: number; readonly found: number };
}

/** Creates the {@link LeaseDeleteMarkers} of one node. Without `remove` (or once the server refuses it) nothing is compacted. */
export function createLeaseDeleteMarkers(deps: {
  remove?: DeleteMarkerRemoval;
  logger: Logger;
  opTimeoutMs: number;
  compactAfterMs?: number;
  now?: () => number;
}): LeaseDeleteMarkers {
  const { logger, opTimeoutMs: bound } = deps;
  const now = deps.now ?? Date.now;
  const after = deps.compactAfterMs ?? COMPACT_AFTER_MS;
  /** Written by this node, in the order written (so in the order due). */
  const own: DeleteMarker[] = [];
  /** Found by full reads: stream sequence by key (a key found again keeps its last marker). */
  const found = new Map<string, DeleteMarker>();
  let purge = deps.remove;

  /** 'done', 'later' (no answer: tried again at the next pass), or 'refused' (no permission: compaction stops). */
  async function purgeOne({ key, seq }: DeleteMarker): Promise<'done' | 'later' | 'refused'> {
    if (!purge) return 'refused';
    try {
      await withTimeout(purge(key, seq), bound, `lease delete marker purge ${key}`);
      return 'done';
    } catch (err) {
      if (err instanceof TimeoutError || !isPermissionDenied(err)) {
        logger.info({ err, key }, 'lease delete marker not purged this time');
        return 'later';
      }
      // Once: the other purges of the same batch are refused too.
      if (purge !== undefined) logger.warn({ err }, "lease delete markers cannot be purged (no permission for the leases stream's purge API); they stay in the bucket");
      purge = undefined;
      own.length = 0;
      found.clear();
      return 'refused';
    }
  }

  /** Purges `due` a few at once; the deleteMarkers purged, in order, up to the first that was not. */
  async function purgeAll(due: DeleteMarker[]): Promise<DeleteMarker[]> {
    const done: DeleteMarker[] = [];
    for (let start = 0; start < due.length; start += PURGES_AT_ONCE) {
      const batch = due.slice(start, start + PURGES_AT_ONCE);
      const outcomes = await Promise.all(batch.map(purgeOne));
      for (const [index, outcome] of outcomes.entries()) if (outcome === 'done') done.push(batch[index]!);
      if (outcomes.some((outcome) => outcome !== 'done')) break;
    }
    return done;
  }

  return {
    wrote(key, seq) {
      if (purge && own.length < MAX_KEPT) own.push({ key, seq, at: now() });
    },
    found(key, seq, at) {
      if (!purge || (found.size >= MAX_KEPT && !found.has(key))) return;
      found.set(key, { key, seq, at });
    },
    async compact() {
      const dueBy = now() - after;
      let count = 0;
      while (count < own.length && count < OWN_PER_PASS && own[count]!.at <= dueBy) count += 1;
      if (count > 0) {
        const done = new Set(await purgeAll(own.slice(0, count)));
        // Kept in order: one not purged (no answer) is tried again first at the next pass.
        const left = own.filter((marker) => !done.has(marker));
        own.length = 0;
        own.push(...left);
      }
      const dueFound: DeleteMarker[] = [];
      for (const marker of found.values()) {
        if (dueFound.length >= FOUND_PER_PASS) break;
        if (marker.at <= dueBy) dueFound.push(marker);
      }
      for (const marker of await purgeAll(dueFound)) if (found.get(marker.key) === marker) found.delete(marker.key);
    },
    size: () => ({ own: own.length, found: found.size }),
  };
}
