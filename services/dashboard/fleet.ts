import type { AgentEvent } from '../../src/protocol/index.ts';

/** One turn as the fleet view shows it. */
export interface TurnRow {
  readonly tenant: string;
  readonly sessionId: string;
  readonly turnId: string;
  /** The runtime node that holds the session (from its lease, else from `session.created`). */
  node: string | undefined;
  /** The turn machine's state; `Queued` until the turn's first state event. */
  state: string;
  step: number | undefined;
  maxSteps: number | undefined;
  model: string | undefined;
  startedAt: number;
  lastEventAt: number;
  endedAt: number | undefined;
  /** `turn.ended`'s reason once the turn ended. */
  reason: string | undefined;
  inputTokens: number;
  outputTokens: number;
  cost: number;
  toolCalls: number;
  /** The last progress message (`[2/8] Executing tools: read_file`). */
  message: string | undefined;
  error: string | undefined;
}

/** What the fleet view gets: turns in flight and the most recent finished ones, newest first. */
export interface FleetSnapshot {
  readonly active: readonly TurnRow[];
  readonly recent: readonly TurnRow[];
  /** The session machines' states, `<tenant>/<sessionId>` → state. */
  readonly sessions: Readonly<Record<string, string>>;
}

/** The fleet: every turn the dashboard has seen events of. Pure: fed with events, read with snapshot(). */
export interface Fleet {
  /** Applies one event; returns true when the fleet changed. */
  apply(event: AgentEvent): boolean;
  /**
   * Fills in what a turn's row missed because the dashboard started after the turn did: its start, limits
   * and the usage of answers logged before. `log` is the session's log; answers already counted are skipped.
   */
  backfill(turnId: string, log: readonly AgentEvent[]): void;
  /** True when the fleet holds a row for `turnId` that began without its `user.message`. */
  needsBackfill(turnId: string): boolean;
  /** Tells the fleet which node holds a session (from the leases); undefined when none does. */
  setNode(tenant: string, sessionId: string, node: string | undefined): void;
  /**
   * Forgets a deleted session (its tombstone was written): its turns leave the view, and events of it that come
   * late are ignored (a deleted id is never used again). Returns true when the fleet changed.
   */
  forget(tenant: string, sessionId: string): boolean;
  snapshot(): FleetSnapshot;
  /** Grows on every change: a cheap dirty check. */
  readonly version: number;
}

const sessionKey = (tenant: string, sessionId: string) => `${tenant}/${sessionId}`;

/** Sets a key of a map that keeps at most `limit` entries, dropping the oldest written. */
function remember<V>(map: Map<string, V>, key: string, value: V, limit: number): void {
  map.delete(key);
  map.set(key, value);
  if (map.size > limit) map.delete(map.keys().next().value!);
}

/**
 * Creates an empty fleet. `recentLimit` finished turns are kept (default 100); a turn that has been
 * silent for `staleMs` (default 1 hour) without ending is dropped, so a node that died mid-turn does not
 * leave it in flight forever. Per-session facts are kept for the `sessionLimit` (default 10 000) sessions
 * seen most recently.
 *
 * @example
 * const fleet = createFleet();
 * fleet.apply(event);
 * fleet.snapshot().active;
 */
export function createFleet(options: { recentLimit?: number; staleMs?: number; sessionLimit?: number; now?: () => number } = {}): Fleet {
  const recentLimit = options.recentLimit ?? 100;
  // Per-session facts (session machine state, creating node) of the sessions seen most recently.
  const sessionLimit = options.sessionLimit ?? 10_000;
  const staleMs = options.staleMs ?? 60 * 60_000;
  const now = options.now ?? Date.now;
  const active = new Map<string, TurnRow>();
  const recent: TurnRow[] = [];
  const nodes = new Map<string, string>();
  const createdBy = new Map<string, string>();
  const sessions = new Map<string, string>();
  /** Per turn: the assistant.message ids counted, so an answer seen both live and in a backfill counts once. */
  const counted = new Map<string, Set<string>>();
  /** Turns whose row began after their prompt. */
  const partial = new Set<string>();
  /** Deleted sessions, most recent kept: their late events are ignored. */
  const deleted = new Map<string, true>();
  let version = 0;

  const turnOf = (event: AgentEvent): TurnRow | undefined => {
    if (event.turnId === undefined) return undefined;
    let row = active.get(event.turnId);
    if (!row) {
      if (recent.some((finished) => finished.turnId === event.turnId)) return undefined;
      const key = sessionKey(event.tenant, event.sessionId);
      row = {
        tenant: event.tenant,
        sessionId: event.sessionId,
        turnId: event.turnId,
        node: nodes.get(key) ?? createdBy.get(key),
        state: 'Queued',
        step: event.step,
        maxSteps: undefined,
        model: undefined,
        startedAt: event.ts,
        lastEventAt: event.ts,
        endedAt: undefined,
        reason: undefined,
        inputTokens: 0,
        outputTokens: 0,
        cost: 0,
        toolCalls: 0,
        message: undefined,
        error: undefined,
      };
      active.set(event.turnId, row);
      if (event.type !== 'user.message') partial.add(event.turnId);
    }
    row.lastEventAt = Math.max(row.lastEventAt, event.ts);
    if (event.step !== undefined) row.step = event.step;
    return row;
  };

  const countAnswer = (row: TurnRow, event: Extract<AgentEvent, { type: 'assistant.message' }>) => {
    const ids = counted.get(row.turnId) ?? new Set<string>();
    counted.set(row.turnId, ids);
    if (ids.has(event.id)) return;
    ids.add(event.id);
    row.inputTokens += event.data.usage.inputTokens;
    row.outputTokens += event.data.usage.outputTokens;
    row.cost += event.data.cost;
    row.model = event.data.model;
  };

  const finish = (row: TurnRow) => {
    active.delete(row.turnId);
    counted.delete(row.turnId);
    partial.delete(row.turnId);
    recent.unshift(row);
    if (recent.length > recentLimit) recent.length = recentLimit;
  };

  function apply(event: AgentEvent): boolean {
    if (deleted.has(sessionKey(event.tenant, event.sessionId))) return false;
    switch (event.type) {
      case 'session.created':
        remember(createdBy, sessionKey(event.tenant, event.sessionId), event.data.createdBy, sessionLimit);
        return false;
      case 'user.message': {
        if (event.data.steer) return false;
        const row = turnOf(event);
        if (!row) return false;
        if (event.data.maxSteps !== undefined) row.maxSteps = event.data.maxSteps;
        if (event.data.model !== undefined) row.model = event.data.model;
        break;
      }
      case 'state': {
        if (event.data.machine === 'session') {
          remember(sessions, sessionKey(event.tenant, event.sessionId), event.data.value, sessionLimit);
          break;
        }
        const row = turnOf(event);
        if (!row) return false;
        row.state = event.data.value;
        break;
      }
      case 'progress': {
        const row = turnOf(event);
        if (!row) return false;
        row.step = event.data.step;
        row.maxSteps = event.data.maxSteps;
        row.message = event.data.message;
        break;
      }
      case 'assistant.message': {
        const row = turnOf(event);
        if (!row) return false;
        countAnswer(row, event);
        break;
      }
      case 'tool.use': {
        const row = turnOf(event);
        if (!row) return false;
        row.toolCalls += 1;
        break;
      }
      case 'turn.ended': {
        const row = turnOf(event);
        if (!row) return false;
        row.reason = event.data.reason;
        row.endedAt = event.ts;
        // The turn's own totals win over the sum of its messages: they include what a resumed turn ran elsewhere.
        row.inputTokens = event.data.usage.inputTokens;
        row.outputTokens = event.data.usage.outputTokens;
        row.cost = event.data.cost;
        if (event.data.error) row.error = `${event.data.error.code}: ${event.data.error.message}`;
        if (row.state === 'Queued' || !['Yielding', 'Cancelled', 'BudgetExceeded', 'Failed'].includes(row.state)) row.state = endState(event.data.reason);
        finish(row);
        break;
      }
      case 'assistant.delta':
        // Deltas change nothing the fleet shows: they never cost a fleet update.
        return false;
      default: {
        const row = turnOf(event);
        if (!row) return false;
      }
    }
    version += 1;
    return true;
  }

  return {
    apply,
    needsBackfill: (turnId) => partial.has(turnId) && active.has(turnId),
    backfill(turnId, log) {
      const row = active.get(turnId);
      if (!row) return;
      partial.delete(turnId);
      for (const event of log) {
        if (event.turnId !== turnId) continue;
        if (event.type === 'user.message' && !event.data.steer) {
          row.startedAt = Math.min(row.startedAt, event.ts);
          if (event.data.maxSteps !== undefined) row.maxSteps ??= event.data.maxSteps;
          if (event.data.model !== undefined) row.model ??= event.data.model;
        } else if (event.type === 'assistant.message') {
          countAnswer(row, event);
        } else if (event.type === 'tool.use') {
          row.toolCalls = Math.max(row.toolCalls, log.filter((other) => other.type === 'tool.use' && other.turnId === turnId).length);
        }
      }
      version += 1;
    },
    setNode(tenant, sessionId, node) {
      const key = sessionKey(tenant, sessionId);
      if (node === undefined) nodes.delete(key);
      else remember(nodes, key, node, sessionLimit);
      let changed = false;
      for (const row of active.values()) {
        if (row.tenant === tenant && row.sessionId === sessionId && node !== undefined && row.node !== node) {
          row.node = node;
          changed = true;
        }
      }
      if (changed) version += 1;
    },
    forget(tenant, sessionId) {
      const key = sessionKey(tenant, sessionId);
      remember(deleted, key, true, sessionLimit);
      const of = (row: TurnRow) => row.tenant === tenant && row.sessionId === sessionId;
      let changed = sessions.delete(key);
      nodes.delete(key);
      createdBy.delete(key);
      for (const row of [...active.values()]) {
        if (!of(row)) continue;
        active.delete(row.turnId);
        counted.delete(row.turnId);
        partial.delete(row.turnId);
        changed = true;
      }
      const kept = recent.filter((row) => !of(row));
      if (kept.length !== recent.length) {
        recent.splice(0, recent.length, ...kept);
        changed = true;
      }
      if (changed) version += 1;
      return changed;
    },
    snapshot() {
      const cutoff = now() - staleMs;
      for (const row of [...active.values()]) {
        if (row.lastEventAt >= cutoff) continue;
        // A turn silent this long is dropped: from open pages too (a new version), and with what was kept for it.
        active.delete(row.turnId);
        counted.delete(row.turnId);
        partial.delete(row.turnId);
        version += 1;
      }
      return {
        active: [...active.values()].sort((a, b) => b.startedAt - a.startedAt).map((row) => ({ ...row })),
        recent: recent.map((row) => ({ ...row })),
        sessions: Object.fromEntries(sessions),
      };
    },
    get version() {
      return version;
    },
  };
}

/** The terminal turn state of a `turn.ended` reason. */
export function endState(reason: string): string {
  switch (reason) {
    case 'yielded':
      return 'Yielding';
    case 'cancelled':
      return 'Cancelled';
    case 'budget_exceeded':
      return 'BudgetExceeded';
    default:
      return 'Failed';
  }
}
