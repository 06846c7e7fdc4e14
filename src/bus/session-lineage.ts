import { AgentbusError, ErrorCode } from '../errors.ts';
import { LogEventType } from '../protocol/index.ts';
import type { LogEvent } from '../protocol/index.ts';
import type { SessionLog, SessionLogRead } from './session-log.ts';

/** One part of a session's history: the events of `sessionId`'s own log up to sequence `through`. */
export interface HistorySegment {
  readonly sessionId: string;
  /** The last sequence of this log that belongs to the history (`Infinity` for the session's own log). */
  readonly through: number;
}

/** Where a fork starts: its `session.forked` event's data. */
export interface ForkPoint {
  readonly parentSessionId: string;
  readonly parentSeq: number;
}

/** The longest chain of forks a history is read through (a fork of a fork of …); deeper is refused as corrupt. */
export const MAX_FORK_DEPTH = 64;

/** The fork point of a session, from its `session.forked` (its log's second event), or undefined for a session that is no fork. */
export async function forkPointOf(log: Pick<SessionLog, 'read'>, tenant: string, sessionId: string, options: { signal?: AbortSignal } = {}): Promise<ForkPoint | undefined> {
  const { events } = await log.read(tenant, sessionId, { limit: 2, ...(options.signal ? { signal: options.signal } : {}) });
  return forkPointIn(events);
}

/**
 * The segments a session's history is read from, oldest first: for a fork, its parent's segments cut at the fork
 * point, then its own log. Stream sequences are global to the log stream, so the segments' events, read in this
 * order, are in sequence order, and a parent's events all come before its fork's own.
 *
 * @example
 * const segments = await historySegments(log, 'acme', 'fork-2'); // [{ sessionId: 'root', through: 41 }, { sessionId: 'fork-1', through: 57 }, { sessionId: 'fork-2', through: Infinity }]
 */
export async function historySegments(log: Pick<SessionLog, 'read'>, tenant: string, sessionId: string, options: { signal?: AbortSignal } = {}): Promise<HistorySegment[]> {
  const segments: HistorySegment[] = [{ sessionId, through: Number.POSITIVE_INFINITY }];
  const seen = new Set([sessionId]);
  let current = sessionId;
  let through = Number.POSITIVE_INFINITY;
  for (;;) {
    const point = await forkPointOf(log, tenant, current, options);
    if (!point) return segments;
    if (seen.has(point.parentSessionId) || segments.length > MAX_FORK_DEPTH) {
      throw new AgentbusError(ErrorCode.internal, `session ${tenant}/${sessionId}: its chain of forks loops or is deeper than ${MAX_FORK_DEPTH} (at ${current})`);
    }
    seen.add(point.parentSessionId);
    through = Math.min(through, point.parentSeq);
    segments.unshift({ sessionId: point.parentSessionId, through });
    current = point.parentSessionId;
  }
}

/** A session's whole history: what it inherited through its forks, then its own log. */
export interface SessionHistoryRead extends SessionLogRead {
  /** How many of `events` come from the parents (they come first, each with its own session id). */
  readonly inherited: number;
}

/**
 * Reads a session's whole history: its parents' events up to each fork point (see {@link historySegments}), then
 * its own log. `lastSeq` and `more` are those of its own log (what its writer expects next). The own log is read
 * first, so a session that is no fork costs one read, as before forks existed. A parent whose log was deleted
 * gives nothing: deleting a session removes its content from its forks' history too.
 */
export async function readSessionHistory(log: Pick<SessionLog, 'read'>, tenant: string, sessionId: string, options: { signal?: AbortSignal; last?: Promise<number> } = {}): Promise<SessionHistoryRead> {
  const signal = options.signal ? { signal: options.signal } : {};
  // `last`: the session's own last sequence, when the caller has it on the way already (read beside other work).
  const own = await log.read(tenant, sessionId, { ...signal, ...(options.last ? { last: options.last } : {}) });
  const point = forkPointIn(own.events);
  if (!point) return { ...own, inherited: 0 };
  if (point.parentSessionId === sessionId) throw new AgentbusError(ErrorCode.internal, `session ${tenant}/${sessionId} names itself as its parent`);
  const events: LogEvent[] = [];
  for (const segment of await historySegments(log, tenant, point.parentSessionId, signal)) {
    const read = await log.read(tenant, segment.sessionId, { through: Math.min(segment.through, point.parentSeq), ...signal });
    events.push(...read.events);
  }
  const inherited = events.length;
  events.push(...own.events);
  return { events, lastSeq: own.lastSeq, more: own.more, inherited };
}

/** The fork point a session's first events name (its `session.forked`, the second event of a fork), if any. */
function forkPointIn(events: readonly LogEvent[]): ForkPoint | undefined {
  for (const event of events.slice(0, 2)) {
    if (event.type === LogEventType.sessionForked) return { parentSessionId: event.data.parentSessionId, parentSeq: event.data.parentSeq };
  }
  return undefined;
}

/**
 * The last whole point of a history at or before `atSeq`: the sequence of the last event after which every turn
 * begun had ended (no prompt waiting for its `turn.ended`, so no open tool call either). A fork is cut there, so it
 * never inherits a turn that would resume in it. Undefined when `atSeq` is before the history's first event.
 */
export function lastWholePoint(events: readonly LogEvent[], atSeq: number): number | undefined {
  const open = new Set<string>();
  let point: number | undefined;
  for (const event of events) {
    const seq = event.seq ?? 0;
    if (seq > atSeq) break;
    if (event.type === LogEventType.userMessage && !event.data.steer && event.turnId) open.add(event.turnId);
    else if (event.type === LogEventType.turnEnded && event.turnId) open.delete(event.turnId);
    if (open.size === 0) point = seq;
  }
  return point;
}
