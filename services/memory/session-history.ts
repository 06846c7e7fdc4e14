import { jetstream } from '@nats-io/jetstream';
import type { NatsConnection } from '@nats-io/nats-core';
import { createSessionLog } from '../../src/bus/session-log.ts';
import type { SessionLog } from '../../src/bus/session-log.ts';
import { historySegments } from '../../src/bus/session-lineage.ts';
import { AgentbusError, ErrorCode, SessionDeletedError } from '../../src/errors.ts';
import type { Logger } from '../../src/logging.ts';
import { DEFAULT_HISTORY_LIMIT } from '../../src/protocol/index.ts';
import type { Codec, SessionHistoryReply, SessionHistoryRequest, Subjects } from '../../src/protocol/index.ts';

/** One session's messages, read back from its log a page at a time. */
export interface SessionHistory {
  /**
   * The page of events after `afterSeq` (from the start without it), oldest first, each with its `seq`. A fork's
   * history starts with what it inherits from its parents (events with the parent's session id), then its own.
   * Rejects with `not_found` for a session that has nothing in the log, `session_deleted` for a deleted one.
   */
  page(tenant: string, sessionId: string, request: SessionHistoryRequest, options?: { signal?: AbortSignal }): Promise<SessionHistoryReply>;
}

/** Options of {@link createSessionHistory}. */
export interface SessionHistoryOptions {
  readonly nc: NatsConnection;
  readonly codec: Codec;
  readonly subjects: Subjects;
  /** The log stream (`AGENTBUS_LOG`). */
  readonly stream: string;
  readonly logger: Logger;
  /** Deleted sessions (see `watchTombstones`). */
  readonly tombstones: { has(tenant: string, sessionId: string): boolean };
  /** Most bytes of events one page holds, so that its reply fits in a NATS message; default 90% of the server's max payload. */
  readonly maxBytes?: number;
  /** Longest read of one page; default 10 s. */
  readonly timeoutMs?: number;
}

/**
 * Reads history straight from the log (the source of truth: every event type, not only what memory indexes),
 * with a direct get of the session's last sequence and an ordered consumer filtered to its log subject from
 * `afterSeq + 1`, both of which nats-server 2.9 serves. Messages that are not valid events are skipped (and
 * logged), as the runtime skips them, but a page's `nextAfterSeq` steps past them.
 */
export function createSessionHistory(options: SessionHistoryOptions): SessionHistory {
  const log: SessionLog = createSessionLog({
    nc: options.nc,
    js: jetstream(options.nc),
    subjects: options.subjects,
    codec: options.codec,
    stream: options.stream,
    logger: options.logger,
  });
  const maxBytes = options.maxBytes ?? Math.floor((options.nc.info?.max_payload ?? 1024 * 1024) * 0.9);
  return {
    async page(tenant, sessionId, request, pageOptions = {}) {
      if (options.tombstones.has(tenant, sessionId)) throw new SessionDeletedError(`session ${tenant}/${sessionId} was deleted`, { tenant, sessionId });
      const afterSeq = request.afterSeq ?? 0;
      const signal = pageOptions.signal ? { signal: pageOptions.signal } : {};
      // A fork's history is its parents' up to each fork point, then its own log (`historySegments`); sequences are
      // global to the stream, so one `afterSeq` pages through them all. A page never spans two logs.
      const segments = await historySegments(log, tenant, sessionId, signal);
      for (const [index, segment] of segments.entries()) {
        const own = index === segments.length - 1;
        if (!own && segment.through <= afterSeq) continue;
        const read = await log.read(tenant, segment.sessionId, {
          after: afterSeq,
          limit: request.limit ?? DEFAULT_HISTORY_LIMIT,
          maxBytes,
          timeoutMs: options.timeoutMs ?? 10_000,
          ...(own ? {} : { through: segment.through }),
          ...signal,
        });
        if (own) {
          if (afterSeq === 0 && read.lastSeq === 0) throw new AgentbusError(ErrorCode.notFound, `session ${tenant}/${sessionId} has nothing in the log`);
          return read.more ? { events: read.events, nextAfterSeq: read.lastSeq } : { events: read.events };
        }
        // Inherited events: the next page goes on from the last one read (in this log, or the next one).
        if (read.events.length > 0) return { events: read.events, nextAfterSeq: read.lastSeq };
      }
      return { events: [] };
    },
  };
}
