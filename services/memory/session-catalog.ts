import { InvalidInputError } from '../../src/errors.ts';
import type { SessionSummary, SessionsListReply, SessionsListRequest } from '../../src/protocol/index.ts';

/** What one logged event tells the catalog. */
export interface CatalogEvent {
  readonly sessionId: string;
  /** Its log sequence: an event noted before (read again after a restart) is not counted twice. */
  readonly seq: number;
  readonly type: string;
  readonly ts: number;
  /** A turn's cost, from `turn.ended`. */
  readonly cost?: number;
  /** An answer's text, from `assistant.message` or `turn.ended`. */
  readonly text?: string;
  /** The parent and fork point, from `session.forked`. */
  readonly forkedFrom?: { readonly sessionId: string; readonly seq: number };
  /** The turn a `turn.started` begins. */
  readonly startedTurn?: string;
}

/** The sessions of one tenant, as the log tells them. */
export interface SessionCatalog {
  note(event: CatalogEvent): void;
  list(request: SessionsListRequest): SessionsListReply;
  forget(sessionId: string): void;
  /** Every session's figures, for a snapshot. */
  entries(): CatalogEntry[];
  /** Takes the figures of a snapshot in. */
  restore(entries: readonly CatalogEntry[]): void;
  size(): number;
  /** The log sequence of the session's own newest `turn.started` read so far, if any. */
  lastTurnStart(sessionId: string): number | undefined;
}

const DEFAULT_LIMIT = 50;
const LAST_TEXT_CHARS = 200;

/** What the catalog keeps of one session. */
export interface CatalogEntry {
  sessionId: string;
  createdAt: number;
  lastActivityAt: number;
  turns: number;
  cost: number;
  lastText: string | undefined;
  /** The last log sequence noted. */
  lastSeq: number;
  /** For a fork: the session and sequence its history continues from. */
  forkedFrom?: { sessionId: string; seq: number };
  /** The session's own newest `turn.started`: its turn and sequence. */
  lastTurn?: { turnId: string; startedSeq: number };
}

/**
 * Sessions in a stable order, oldest first: by the time of their first event, then by id. A page token is the
 * last key of a page, so pages stay without gaps or repeats while sessions are created: a new one sorts after
 * every session that existed when the listing began (the log is appended in time order).
 */
export function createSessionCatalog(): SessionCatalog {
  const entries = new Map<string, CatalogEntry>();
  let ordered: CatalogEntry[] | undefined;
  return {
    note(event) {
      let entry = entries.get(event.sessionId);
      if (!entry) {
        entry = { sessionId: event.sessionId, createdAt: event.ts, lastActivityAt: event.ts, turns: 0, cost: 0, lastText: undefined, lastSeq: 0 };
        entries.set(event.sessionId, entry);
        ordered = undefined;
      }
      if (event.seq <= entry.lastSeq) return;
      entry.lastSeq = event.seq;
      entry.lastActivityAt = Math.max(entry.lastActivityAt, event.ts);
      if (event.type === 'turn.ended') {
        entry.turns += 1;
        entry.cost += event.cost ?? 0;
      }
      if (event.text) entry.lastText = event.text.slice(0, LAST_TEXT_CHARS);
      if (event.forkedFrom) entry.forkedFrom = { sessionId: event.forkedFrom.sessionId, seq: event.forkedFrom.seq };
      if (event.startedTurn) entry.lastTurn = { turnId: event.startedTurn, startedSeq: event.seq };
    },
    list(request) {
      ordered ??= [...entries.values()].sort(compare);
      const limit = request.limit ?? DEFAULT_LIMIT;
      let start = 0;
      if (request.pageToken !== undefined) {
        const after = parsePageToken(request.pageToken);
        // The first session past the token's key: binary search in the sorted list.
        let low = 0;
        let high = ordered.length;
        while (low < high) {
          const middle = (low + high) >>> 1;
          if (compare(ordered[middle]!, after) <= 0) low = middle + 1;
          else high = middle;
        }
        start = low;
      }
      const page = ordered.slice(start, start + limit);
      const sessions = page.map(summaryOf);
      const last = page.at(-1);
      return start + limit < ordered.length && last ? { sessions, nextPageToken: pageTokenOf(last) } : { sessions };
    },
    forget(sessionId) {
      if (entries.delete(sessionId)) ordered = undefined;
    },
    entries: () => [...entries.values()].map((entry) => ({ ...entry })),
    restore(saved) {
      for (const entry of saved) entries.set(entry.sessionId, { ...entry, lastText: entry.lastText ?? undefined });
      ordered = undefined;
    },
    size: () => entries.size,
    lastTurnStart: (sessionId) => entries.get(sessionId)?.lastTurn?.startedSeq,
  };
}

function compare(a: Pick<CatalogEntry, 'createdAt' | 'sessionId'>, b: Pick<CatalogEntry, 'createdAt' | 'sessionId'>): number {
  return a.createdAt - b.createdAt || (a.sessionId < b.sessionId ? -1 : a.sessionId > b.sessionId ? 1 : 0);
}

function summaryOf(entry: CatalogEntry): SessionSummary {
  return {
    sessionId: entry.sessionId,
    createdAt: entry.createdAt,
    lastActivityAt: entry.lastActivityAt,
    turns: entry.turns,
    cost: Math.round(entry.cost * 1e9) / 1e9,
    lastSeq: entry.lastSeq,
    ...(entry.lastText === undefined ? {} : { lastText: entry.lastText }),
    ...(entry.forkedFrom ? { forkedFrom: { sessionId: entry.forkedFrom.sessionId, seq: entry.forkedFrom.seq } } : {}),
  };
}

function pageTokenOf(entry: CatalogEntry): string {
  return Buffer.from(`${entry.createdAt}.${entry.sessionId}`).toString('base64url');
}

function parsePageToken(token: string): Pick<CatalogEntry, 'createdAt' | 'sessionId'> {
  const match = /^(\d{1,16})\.([A-Za-z0-9_-]{1,64})$/.exec(Buffer.from(token, 'base64url').toString('utf8'));
  if (!match) throw new InvalidInputError('pageToken is not one this service handed out');
  return { createdAt: Number(match[1]), sessionId: match[2]! };
}
