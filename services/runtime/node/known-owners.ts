import type { NodeLiveness } from './node-liveness.ts';

/** Entries past which {@link KnownOwners} starts again empty. */
const MAX_OWNERS = 100_000;

/**
 * Who holds the sessions this node does not, as learnt from claims: every node hears every message, and one held
 * by a node heard from within its TTL is not this node's to claim, so it costs no bucket operation at all.
 */
export interface KnownOwners {
  /** The node last known to hold the lease `key`. */
  get(key: string): string | undefined;
  /** Notes that `owner` holds `key`; this node itself and `''` (nobody) are not noted. */
  note(key: string, owner: string): void;
  delete(key: string): void;
}

/**
 * Creates the owners map of one node. Entries of a node found dead go at once; the map is cleared when it grows
 * past its bound.
 */
export function createKnownOwners(liveness: Pick<NodeLiveness, 'nodeId' | 'onDead'>): KnownOwners {
  const owners = new Map<string, string>();
  liveness.onDead((node) => {
    for (const [key, owner] of owners) if (owner === node) owners.delete(key);
  });
  return {
    get: (key) => owners.get(key),
    note(key, owner) {
      if (owner === '' || owner === liveness.nodeId) return;
      if (owners.size >= MAX_OWNERS) owners.clear();
      owners.set(key, owner);
    },
    delete: (key) => void owners.delete(key),
  };
}
