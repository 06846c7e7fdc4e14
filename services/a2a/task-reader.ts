import { TaskState } from '@a2a-js/sdk';
import type { ListTasksRequest, ListTasksResponse, Task } from '@a2a-js/sdk';
import { RequestMalformedError } from '@a2a-js/sdk/errors';
import type { AgentbusClient } from '../../src/client/index.ts';
import { AgentbusError, ErrorCode } from '../../src/errors.ts';
import { MAX_HISTORY_LIMIT } from '../../src/protocol/index.ts';
import type { LogEvent, SessionSummary } from '../../src/protocol/index.ts';
import { stateOf, taskIdOf, taskOf, turnsOf } from './turn-task.ts';
import type { TaskView, TurnRecord } from './turn-task.ts';

/** Tasks per ListTasks page when the request names no `pageSize`, and the most it may name (A2A §3.1.4). */
export const DEFAULT_PAGE_SIZE = 50;
export const MAX_PAGE_SIZE = 100;

/** Reads tasks back from the sessions' logs (memory's `history` and `sessions.list`): nothing is kept in memory. */
export interface TaskReader {
  /** Every turn of a session, from its log; an empty list for a session that does not exist. */
  turns(sessionId: string, signal?: AbortSignal): Promise<TurnRecord[]>;
  /** One turn of a session, or undefined when the log holds none such. */
  turn(sessionId: string, turnId: string, signal?: AbortSignal): Promise<TurnRecord | undefined>;
  /** The tenant's tasks, newest status first, filtered and paged as A2A's ListTasks says. */
  list(params: Partial<ListTasksRequest>, signal?: AbortSignal): Promise<ListTasksResponse>;
}

/** A position in the newest-first order: the task's status time, then its id. */
interface Cursor {
  readonly ts: number;
  readonly id: string;
}

const encodeCursor = (cursor: Cursor) => Buffer.from(JSON.stringify([cursor.ts, cursor.id])).toString('base64url');

function decodeCursor(token: string): Cursor {
  try {
    const [ts, id] = JSON.parse(Buffer.from(token, 'base64url').toString('utf8')) as [unknown, unknown];
    if (typeof ts === 'number' && typeof id === 'string') return { ts, id };
  } catch {
    // Falls through to the error below.
  }
  throw new RequestMalformedError(`pageToken ${JSON.stringify(token.slice(0, 64))} is not one this server gave`);
}

/** Newest first; ties by id, so that a page boundary is exact. */
const newestFirst = (a: Cursor, b: Cursor) => b.ts - a.ts || (a.id < b.id ? -1 : a.id > b.id ? 1 : 0);

/** How many turn records ListTasks keeps between calls, by default (each holds its prompt and end events). */
const DEFAULT_CACHED_TURNS = 20_000;

/**
 * A task reader for one tenant. ListTasks lists every session of the tenant (newest activity first, down to
 * `statusTimestampAfter`), or takes the one `contextId` names, and reads the turns of each from its log. What it read
 * of a session is kept (up to `maxCachedTurns` turns in all, least recently used dropped first) under the session's
 * `lastSeq` from the listing, and read again only once that moves: a client paging through a tenant's tasks, or polling
 * them, costs one listing and the sessions that changed, not every log each time. GetTask always reads the log.
 */
export function createTaskReader(options: { client: AgentbusClient; tenant: string; timeoutMs?: number; maxCachedTurns?: number }): TaskReader {
  const { client, tenant } = options;
  const timeoutMs = options.timeoutMs ?? 10_000;
  const turnCache = createTurnCache(options.maxCachedTurns ?? DEFAULT_CACHED_TURNS);

  async function events(sessionId: string, signal?: AbortSignal): Promise<LogEvent[]> {
    const all: LogEvent[] = [];
    let afterSeq: number | undefined;
    for (;;) {
      let page;
      try {
        page = await client.history({ tenant, sessionId }, { limit: MAX_HISTORY_LIMIT, ...(afterSeq === undefined ? {} : { afterSeq }) }, { timeoutMs, ...(signal ? { signal } : {}) });
      } catch (error) {
        if (error instanceof AgentbusError && (error.code === ErrorCode.notFound || error.code === ErrorCode.sessionDeleted)) return [];
        throw error;
      }
      all.push(...page.events);
      if (page.nextAfterSeq === undefined || page.events.length === 0) return all;
      afterSeq = page.nextAfterSeq;
    }
  }

  async function sessions(signal?: AbortSignal): Promise<SessionSummary[]> {
    const all: SessionSummary[] = [];
    let pageToken: string | undefined;
    do {
      const page = await client.listSessions(tenant, { limit: 500, ...(pageToken ? { pageToken } : {}) }, { timeoutMs, ...(signal ? { signal } : {}) });
      all.push(...page.sessions);
      pageToken = page.nextPageToken;
    } while (pageToken);
    return all;
  }

  const turns = async (sessionId: string, signal?: AbortSignal) => turnsOf(await events(sessionId, signal));

  /** A listed session's turns: kept from an earlier call while its `lastSeq` has not moved. */
  async function listedTurns(session: Pick<SessionSummary, 'sessionId' | 'lastSeq'>, signal?: AbortSignal): Promise<readonly TurnRecord[]> {
    if (session.lastSeq === undefined) return turns(session.sessionId, signal);
    const kept = turnCache.get(session.sessionId, session.lastSeq);
    if (kept) return kept;
    const read = await turns(session.sessionId, signal);
    turnCache.set(session.sessionId, session.lastSeq, read);
    return read;
  }

  return {
    turns,
    async turn(sessionId, turnId, signal) {
      return (await turns(sessionId, signal)).find((turn) => turn.turnId === turnId);
    },

    async list(params, signal) {
      const pageSize = params.pageSize ?? DEFAULT_PAGE_SIZE;
      if (!Number.isInteger(pageSize) || pageSize < 1 || pageSize > MAX_PAGE_SIZE) throw new RequestMalformedError(`pageSize must be 1-${MAX_PAGE_SIZE}, got ${pageSize}`);
      if (params.historyLength !== undefined && params.historyLength < 0) throw new RequestMalformedError('historyLength must not be negative');
      const after = params.pageToken ? decodeCursor(params.pageToken) : undefined;
      const since = params.statusTimestampAfter ? Date.parse(params.statusTimestampAfter) : undefined;
      if (since !== undefined && Number.isNaN(since)) throw new RequestMalformedError(`statusTimestampAfter must be an ISO 8601 time, got ${JSON.stringify(params.statusTimestampAfter)}`);
      const wanted = params.status !== undefined && params.status !== TaskState.TASK_STATE_UNSPECIFIED ? params.status : undefined;
      const view: TaskView = { historyLength: params.historyLength, includeArtifacts: params.includeArtifacts === true };

      const candidates: Array<Pick<SessionSummary, 'sessionId' | 'lastActivityAt' | 'lastSeq'>> = params.contextId
        ? [{ sessionId: params.contextId, lastActivityAt: Number.POSITIVE_INFINITY }]
        : (await sessions(signal)).sort((a, b) => b.lastActivityAt - a.lastActivityAt);
      const matching: Array<{ cursor: Cursor; record: TurnRecord }> = [];
      for (const session of candidates) {
        // A session's turns are no newer than its last activity: past `statusTimestampAfter`, no later one matches.
        if (since !== undefined && session.lastActivityAt < since) break;
        for (const record of await listedTurns(session, signal)) {
          const cursor = { ts: record.lastTs, id: taskIdOf(record.sessionId, record.turnId) };
          if (since !== undefined && cursor.ts < since) continue;
          if (wanted !== undefined && stateOf(record) !== wanted) continue;
          matching.push({ cursor, record });
        }
      }
      matching.sort((a, b) => newestFirst(a.cursor, b.cursor));
      const rest = after ? matching.filter(({ cursor }) => newestFirst(after, cursor) < 0) : matching;
      const page = rest.slice(0, pageSize);
      const tasks: Task[] = page.map(({ record }) => taskOf(record, view));
      const last = page.at(-1);
      return { tasks, nextPageToken: rest.length > pageSize && last ? encodeCursor(last.cursor) : '', pageSize, totalSize: matching.length };
    },
  };
}

/** The turns of sessions as last read, each under the `lastSeq` it was read at, bounded by the number of turns held. */
function createTurnCache(maxTurns: number) {
  const entries = new Map<string, { readonly lastSeq: number; readonly turns: readonly TurnRecord[] }>();
  let held = 0;
  const drop = (sessionId: string) => {
    const entry = entries.get(sessionId);
    if (!entry) return;
    entries.delete(sessionId);
    held -= entry.turns.length;
  };
  return {
    get(sessionId: string, lastSeq: number): readonly TurnRecord[] | undefined {
      const entry = entries.get(sessionId);
      if (!entry || entry.lastSeq !== lastSeq) return undefined;
      // Most recently used last: the first key is the one to drop.
      entries.delete(sessionId);
      entries.set(sessionId, entry);
      return entry.turns;
    },
    set(sessionId: string, lastSeq: number, turns: readonly TurnRecord[]): void {
      drop(sessionId);
      if (turns.length > maxTurns) return;
      entries.set(sessionId, { lastSeq, turns });
      held += turns.length;
      for (const oldest of entries.keys()) {
        if (held <= maxTurns) break;
        drop(oldest);
      }
    },
  };
}
