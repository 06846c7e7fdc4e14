/** The calls one worker holds, so that a cancel message can find and abort them. */
export interface CallRegistry {
  /** Registers a call; returns its controller, or undefined when a cancel for it already came. */
  open(tool: string, callId: string): AbortController | undefined;
  /** Forgets a finished call. */
  close(tool: string, callId: string): void;
  /**
   * Aborts a held call with `reason` and returns true; for a call not held here, remembers the id for a
   * while (the call may still sit in this worker's subscription buffer) and returns false.
   */
  cancel(tool: string, callId: string, reason: Error): boolean;
  /** Aborts every held call. */
  abortAll(reason: Error): void;
  /** Number of held calls. */
  readonly size: number;
}

/** Options of {@link createCallRegistry}. */
export interface CallRegistryOptions {
  /** How many cancelled-but-not-held ids to remember; the oldest go first. Default 1000. */
  readonly rememberCancelled?: number;
}

/**
 * Creates the registry of in-flight calls of a worker, keyed by tool and call id.
 *
 * @example
 * const controller = registry.open('read_file', callId);
 * try { await run(controller.signal); } finally { registry.close('read_file', callId); }
 */
export function createCallRegistry(options: CallRegistryOptions = {}): CallRegistry {
  const limit = options.rememberCancelled ?? 1000;
  const held = new Map<string, AbortController>();
  // Insertion-ordered, so the first key is the oldest.
  const cancelled = new Set<string>();
  const key = (tool: string, callId: string) => `${tool}\u0000${callId}`;

  return {
    get size() {
      return held.size;
    },
    open(tool, callId) {
      const id = key(tool, callId);
      if (cancelled.delete(id)) return undefined;
      const controller = new AbortController();
      held.set(id, controller);
      return controller;
    },
    close(tool, callId) {
      held.delete(key(tool, callId));
    },
    cancel(tool, callId, reason) {
      const id = key(tool, callId);
      const controller = held.get(id);
      if (controller) {
        controller.abort(reason);
        return true;
      }
      cancelled.add(id);
      while (cancelled.size > limit) {
        const oldest = cancelled.values().next().value;
        if (oldest === undefined) break;
        cancelled.delete(oldest);
      }
      return false;
    },
    abortAll(reason) {
      for (const controller of held.values()) controller.abort(reason);
    },
  };
}
