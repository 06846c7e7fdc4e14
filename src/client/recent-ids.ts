/** How many ids {@link createRecentIds} remembers by default. */
export const RECENT_IDS_DEFAULT_LIMIT = 1024;

/** A bounded set of the ids most recently seen: the oldest is forgotten once `limit` are held. */
export interface RecentIds {
  /** Records `id`; true when it was already among the recent ones (a repeat), false when new. */
  repeat(id: string): boolean;
}

/**
 * Creates a bounded set of recent ids, for dropping a message delivered twice (a retried append on a plain
 * subscription, which no stream deduplicates).
 *
 * @example
 * const recent = createRecentIds();
 * recent.repeat('a'); // false
 * recent.repeat('a'); // true
 */
export function createRecentIds(limit: number = RECENT_IDS_DEFAULT_LIMIT): RecentIds {
  if (!Number.isInteger(limit) || limit < 1) throw new RangeError(`the recent-id limit must be a positive whole number, got ${limit}`);
  // A Set iterates in insertion order: its first entry is the oldest.
  const ids = new Set<string>();
  return {
    repeat(id) {
      if (ids.has(id)) return true;
      ids.add(id);
      if (ids.size > limit) ids.delete(ids.values().next().value as string);
      return false;
    },
  };
}
