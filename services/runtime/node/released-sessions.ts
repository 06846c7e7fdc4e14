import { sessionOfKey } from './lease-store.ts';
import type { LeaseStore, OrphanSession } from './lease-store.ts';
import type { ReleasedMarkers } from './released-markers.ts';

/**
 * The leases' side of releases with work left: the marker written after such a release, the releases whose write got
 * no answer, and the periodic sweep's read of the markers ({@link ReleasedMarkers}).
 */
export interface ReleasedSessions {
  /**
   * Marks a lease released with work at `revision`. Called after the lease is written, so a marker never names a
   * release that did not happen; should this node die between the two, the nodes that find it dead read every lease.
   */
  mark(key: string, revision: number): Promise<void>;
  /** A release with work whose write got no answer (it may have been applied): read back and marked by `retry`. */
  unsure(key: string): void;
  /** Sessions released with work since the last call, but those this node holds (`isHeld`). */
  found(isHeld: (key: string) => boolean): Promise<OrphanSession[]>;
  /** Reads back the unsure releases (marked if applied), and writes again the markers the bucket did not take. */
  retry(): Promise<void>;
}

/** Creates the {@link ReleasedSessions} of one node. */
export function createReleasedSessions(deps: { store: LeaseStore; markers: ReleasedMarkers }): ReleasedSessions {
  const { store, markers } = deps;
  /** Leases whose release with work may or may not have been written (no answer). */
  const unsure = new Set<string>();
  return {
    mark: (key, revision) => markers.mark(key, revision),
    unsure: (key) => void unsure.add(key),
    async found(isHeld) {
      const found: OrphanSession[] = [];
      const readRevision = async (key: string) => (await store.get(key))?.revision ?? null;
      for (const { key } of await markers.pending(readRevision)) {
        if (isHeld(key)) continue;
        const session = sessionOfKey(key);
        if (session) found.push(session);
      }
      return found;
    },
    async retry() {
      for (const key of [...unsure]) {
        const entry = await store.get(key);
        unsure.delete(key);
        const value = store.valueOf(entry);
        if (entry && value?.node === '' && value.active) await markers.mark(key, entry.revision);
      }
      await markers.retry();
    },
  };
}
