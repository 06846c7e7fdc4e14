/** Where one session stands in the script. */
export interface SessionCursor {
  /** Provider calls this session has made so far, the current one included. */
  readonly calls: number;
  /** Tool calls handed out to this session so far. */
  readonly toolCalls: number;
}

/** Per-session script cursors, bounded: the least recently used session is forgotten first. */
export interface SessionCursors {
  /** Counts one provider call of `key` and returns the index of the response it takes. */
  nextCall(key: string): number;
  /** Counts one tool call of `key` and returns its 1-based number. */
  nextToolCall(key: string): number;
  /** The cursor of `key`, if it is remembered. */
  get(key: string): SessionCursor | undefined;
  readonly size: number;
}

/**
 * Creates a bounded cursor store. A Map keeps insertion order, so re-inserting on use makes the
 * first key the least recently used one.
 */
export function createSessionCursors(maxSessions = 10_000): SessionCursors {
  const cursors = new Map<string, { calls: number; toolCalls: number }>();

  function touch(key: string): { calls: number; toolCalls: number } {
    const found = cursors.get(key);
    if (found) {
      cursors.delete(key);
      cursors.set(key, found);
      return found;
    }
    const created = { calls: 0, toolCalls: 0 };
    cursors.set(key, created);
    while (cursors.size > maxSessions) {
      const oldest = cursors.keys().next();
      if (oldest.done) break;
      cursors.delete(oldest.value);
    }
    return created;
  }

  return {
    nextCall(key) {
      const cursor = touch(key);
      cursor.calls += 1;
      return cursor.calls - 1;
    },
    nextToolCall(key) {
      const cursor = touch(key);
      cursor.toolCalls += 1;
      return cursor.toolCalls;
    },
    get(key) {
      const cursor = cursors.get(key);
      return cursor ? { ...cursor } : undefined;
    },
    get size() {
      return cursors.size;
    },
  };
}
