import type { KV } from '@nats-io/kv';
import type { Codec } from '../../../src/protocol/index.ts';
import type { Logger } from '../../../src/logging.ts';
import { withTimeout } from '../../../src/with-timeout.ts';
import { isPermissionDenied } from '../../../src/bus/permission-denied.ts';
import { isRevisionConflict } from '../../../src/bus/revision-conflict.ts';
import { TimeoutError } from '../../../src/errors.ts';

/**
 * Marker keys live in the leases bucket under this first token: `released.<tenant>.<sessionId>`. A lease key has
 * two tokens (`<tenant>.<sessionId>`, both subject tokens without dots), so no marker can be taken for a lease.
 */
export const RELEASED_PREFIX = 'released';

/**
 * True for a release marker's key: `released.<tenant>.<sessionId>`, three tokens. A lease key has two, so the lease
 * of a session of a tenant named `released` (`released.<sessionId>`) is not one.
 */
export function isMarkerKey(key: string): boolean {
  return key.startsWith(`${RELEASED_PREFIX}.`) && key.indexOf('.', RELEASED_PREFIX.length + 1) !== -1;
}

/** A marker as stored: the lease revision its release wrote (node `''`, `active: true`). */
export interface MarkerValue {
  readonly lease: number;
}

/** One marker entry as listed from the bucket: its key (without the prefix), its own revision, its operation. */
export interface MarkerEntry {
  /** The lease key, `<tenant>.<sessionId>`. */
  readonly key: string;
  readonly revision: number;
  /** The lease revision written by the release; undefined for a removed marker (a `DEL` or `PURGE`). */
  readonly lease: number | undefined;
}

/**
 * Lists the marker entries written from stream sequence `from` on, in order (an ordered push consumer filtered to
 * the markers' subjects); empty at once when there are none.
 */
export type MarkerListing = (from: number) => Promise<MarkerEntry[]>;

/**
 * Removes a marker's messages up to and including stream sequence `revision`, leaving nothing behind (no delete
 * marker); a newer marker of the same key, written after `revision`, stays.
 */
export type MarkerRemoval = (key: string, revision: number) => Promise<void>;

/** Delete markers left by earlier versions compacted per pass, at most: one stream purge each. */
const LEFTOVERS_PER_PASS = 64;
/** Delete markers kept to compact, at most; past it they are found again by a node's first pass. */
const MAX_LEFTOVERS = 10_000;

/** A released lease to resume, and the marker that said so. */
export interface MarkedRelease {
  readonly key: string;
  readonly leaseRevision: number;
}

/**
 * The released-with-work markers of one node. A node that releases a lease marked `active` writes a marker for it
 * (after the lease); the sweeper lists only the markers written since its last pass, so a sweep costs what was
 * released, not what the bucket holds. A marker is removed once its lease has moved on from the release it names
 * (claimed again, deleted or purged): its messages up to its own revision are purged from the stream, so no delete
 * marker stays behind to pile up (nothing reads markers' deletes: a node that listed the marker and misses its
 * removal finds the lease moved on, and its own removal purges nothing). Delete markers already in the bucket
 * (written by earlier versions, which deleted markers) are purged as they are listed, a few per pass.
 */
export interface ReleasedMarkers {
  /** Writes the marker of a lease released active at `leaseRevision`; kept to write again if the bucket did not answer. */
  mark(key: string, leaseRevision: number): Promise<void>;
  /** Writes again the markers the bucket did not take; cheap when none are waiting (no I/O). */
  retry(): Promise<void>;
  /**
   * Lists the markers written since the last pass, and returns those whose lease still is the release they name (a
   * session to resume). Markers whose lease moved on are removed; ones this node cannot tell yet stay for the next pass.
   */
  pending(readLeaseRevision: (key: string) => Promise<number | null>): Promise<MarkedRelease[]>;
  /** Markers waiting here: listed and not settled, or not written yet; delete markers listed and not compacted yet. */
  size(): { readonly listed: number; readonly unwritten: number; readonly leftovers: number };
}

/** Creates the markers of one node over the leases bucket. */
export function createReleasedMarkers(deps: {
  kv: KV;
  codec: Codec;
  list: MarkerListing;
  /** Purges a marker; without it (or once the server refuses it) markers are deleted, leaving delete markers. */
  remove?: MarkerRemoval;
  logger: Logger;
  opTimeoutMs: number;
}): ReleasedMarkers {
  const { kv, codec, logger, opTimeoutMs: bound } = deps;
  const markerKey = (key: string) => `${RELEASED_PREFIX}.${key}`;
  /** Markers whose write failed: lease key → lease revision. */
  const unwritten = new Map<string, number>();
  /** Markers listed and not yet settled: lease key → entry. */
  const listed = new Map<string, MarkerEntry>();
  /** The next stream sequence to list from. */
  let from = 0;
  /** Delete markers listed, to purge: `released.<key>` through `revision`. */
  const leftovers: MarkerEntry[] = [];
  let purge = deps.remove;

  /** Purges a marker through `revision`; false when the bucket did not answer (tried again at the next pass). */
  async function purgeMarker(key: string, revision: number): Promise<boolean> {
    if (!purge) return false;
    try {
      await withTimeout(purge(key, revision), bound, `release marker purge ${key}`);
      return true;
    } catch (err) {
      if (err instanceof TimeoutError || !isPermissionDenied(err)) {
        logger.info({ err, key }, 'release marker not purged this time');
        return false;
      }
      // A server config that does not let this node purge the bucket's stream: deleting still works.
      logger.warn({ err }, 'release markers cannot be purged (no permission for the leases stream\'s purge API); deleting them, which leaves delete markers behind');
      purge = undefined;
      return false;
    }
  }

  /** Removes a marker whose lease moved on; false when it may still be there. */
  async function remove(key: string, revision: number): Promise<boolean> {
    if (await purgeMarker(key, revision)) return true;
    if (purge) return false;
    try {
      await withTimeout(kv.delete(markerKey(key), { previousSeq: revision }), bound, `release marker delete ${key}`);
      return true;
    } catch (err) {
      // Someone else removed it (a purge leaves nothing to compare with) or wrote a newer marker, which is listed
      // in turn: this one is done with either way.
      if (isRevisionConflict(err)) return true;
      logger.info({ err, key }, 'release marker not removed this time');
      return false;
    }
  }

  async function write(key: string, leaseRevision: number): Promise<boolean> {
    try {
      await withTimeout(kv.put(markerKey(key), codec.encode({ lease: leaseRevision } satisfies MarkerValue)), bound, `release marker ${key}`);
      if (unwritten.get(key) === leaseRevision) unwritten.delete(key);
      return true;
    } catch (err) {
      logger.warn({ err, key }, 'release marker not written; trying again at the next sweep');
      if ((unwritten.get(key) ?? 0) <= leaseRevision) unwritten.set(key, leaseRevision);
      return false;
    }
  }

  return {
    async mark(key, leaseRevision) {
      await write(key, leaseRevision);
    },
    async retry() {
      for (const [key, leaseRevision] of [...unwritten]) if (!(await write(key, leaseRevision))) return;
    },
    async pending(readLeaseRevision) {
      for (const entry of await deps.list(from)) {
        from = Math.max(from, entry.revision + 1);
        if (entry.lease === undefined) {
          listed.delete(entry.key);
          if (purge && leftovers.length < MAX_LEFTOVERS) leftovers.push(entry);
        } else {
          listed.set(entry.key, entry);
        }
      }
      const found: MarkedRelease[] = [];
      for (const [key, entry] of [...listed]) {
        const lease = entry.lease!;
        const current = await readLeaseRevision(key);
        // A direct read may come from a replica behind the release: then nothing can be told yet.
        if (current !== null && current < lease) continue;
        if (current === lease) {
          found.push({ key, leaseRevision: lease });
          continue;
        }
        // The lease moved on (claimed again, deleted, purged): the marker is done with. A newer marker of the same
        // key (a second release) is past its revision, so it stays, and is listed at the next pass.
        if ((await remove(key, entry.revision)) && listed.get(key) === entry) listed.delete(key);
      }
      // Bounded: a node's first pass over a bucket of an earlier version may list many.
      for (let count = 0; count < LEFTOVERS_PER_PASS && leftovers.length > 0; count++) {
        const { key, revision } = leftovers[0]!;
        if (!(await purgeMarker(key, revision))) break;
        leftovers.shift();
      }
      if (!purge) leftovers.length = 0;
      return found;
    },
    size: () => ({ listed: listed.size, unwritten: unwritten.size, leftovers: leftovers.length }),
  };
}
