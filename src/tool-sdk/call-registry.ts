/** Whose call it is: a cancel that names a scope reaches only calls of that scope. */
export interface CallOwner {
  readonly tenant: string;
  readonly sessionId: string;
}

/** The calls one worker holds, so that a cancel message can find and abort them. */
export interface CallRegistry {
  /** Registers a call of `owner`; returns its controller, or undefined when a cancel for it already came. */
  open(tool: string, callId: string, owner: CallOwner): AbortController | undefined;
  /** Forgets a finished call (the one `open` gave this controller). */
  close(tool: string, callId: string, controller: AbortController): void;
  /**
   * Aborts the held calls of that id with `reason` and returns true. A cancel that names an owner (a runtime's since
   * call ids became per attempt) reaches only that owner's call; one that names none (an older runtime's) reaches
   * every call of the id. For a call not held here, remembers the cancel for a while (the call may still sit in this
   * worker's subscription buffer) and returns false: a later call of that id is refused only when it is the owner's.
   */
  cancel(tool: string, callId: string, reason: Error, scope?: Partial<CallOwner>): boolean;
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

interface Held {
  readonly controller: AbortController;
  readonly owner: CallOwner;
}

/** True when a cancel's scope names this owner: each field it gives matches (an empty scope names every owner). */
const names = (scope: Partial<CallOwner>, owner: CallOwner) =>
  (scope.tenant === undefined || scope.tenant === owner.tenant) && (scope.sessionId === undefined || scope.sessionId === owner.sessionId);

/**
 * Creates the registry of in-flight calls of a worker, keyed by tool and call id, each held with its owner. Call
 * ids are minted per attempt by the runtime and unique across the fleet; the owner check is defence in depth, and
 * what keeps the calls of older runtimes (whose first attempt reused the model's id, `call_0`) apart.
 *
 * @example
 * const controller = registry.open('read_file', callId, { tenant, sessionId });
 * try { await run(controller.signal); } finally { registry.close('read_file', callId, controller); }
 */
export function createCallRegistry(options: CallRegistryOptions = {}): CallRegistry {
  const limit = options.rememberCancelled ?? 1000;
  // Most ids have one call; an older runtime's reused id may have several, one per session.
  const held = new Map<string, Held[]>();
  let size = 0;
  // Insertion-ordered, so the first key is the oldest; each with the scope its cancel named.
  const cancelled = new Map<string, Partial<CallOwner>>();
  const key = (tool: string, callId: string) => `${tool}\u0000${callId}`;

  return {
    get size() {
      return size;
    },
    open(tool, callId, owner) {
      const id = key(tool, callId);
      const scope = cancelled.get(id);
      // A cancel of another session's call of the same id is not this call's.
      if (scope && names(scope, owner)) {
        cancelled.delete(id);
        return undefined;
      }
      const controller = new AbortController();
      const list = held.get(id);
      if (list) list.push({ controller, owner });
      else held.set(id, [{ controller, owner }]);
      size += 1;
      return controller;
    },
    close(tool, callId, controller) {
      const id = key(tool, callId);
      const list = held.get(id);
      const at = list?.findIndex((call) => call.controller === controller) ?? -1;
      if (!list || at === -1) return;
      list.splice(at, 1);
      size -= 1;
      if (list.length === 0) held.delete(id);
    },
    cancel(tool, callId, reason, scope = {}) {
      const id = key(tool, callId);
      const reached = (held.get(id) ?? []).filter((call) => names(scope, call.owner));
      for (const call of reached) call.controller.abort(reason);
      if (reached.length > 0) return true;
      cancelled.delete(id);
      cancelled.set(id, { ...(scope.tenant === undefined ? {} : { tenant: scope.tenant }), ...(scope.sessionId === undefined ? {} : { sessionId: scope.sessionId }) });
      while (cancelled.size > limit) {
        const oldest = cancelled.keys().next().value;
        if (oldest === undefined) break;
        cancelled.delete(oldest);
      }
      return false;
    },
    abortAll(reason) {
      for (const list of held.values()) for (const call of list) call.controller.abort(reason);
    },
  };
}
