import { DeliverPolicy } from '@nats-io/jetstream';
import type { JetStreamClient, JetStreamManager } from '@nats-io/jetstream';
import type { SessionLog } from '../../src/bus/session-log.ts';
import { readSessionHistory } from '../../src/bus/session-lineage.ts';
import { TimeoutError, abortReason } from '../../src/errors.ts';
import type { Logger } from '../../src/logging.ts';
import { LiveEventType, decodeSessionEvent } from '../../src/protocol/index.ts';
import type { AgentEvent, Codec, LogEvent, Subjects } from '../../src/protocol/index.ts';

/** A session read back from the bus. */
export interface SessionRead {
  readonly tenant: string;
  readonly sessionId: string;
  /** The durable log, each event with its `seq`; a fork's starts with its parents' events up to its fork point. */
  readonly log: readonly LogEvent[];
  /** What the live stream still holds of the session (5 minutes), deltas included. */
  readonly live: readonly AgentEvent[];
}

/** A session the log holds, for the session list. */
export interface SessionListEntry {
  readonly tenant: string;
  readonly sessionId: string;
  readonly events: number;
}

/** Reads sessions back from `AGENTBUS_LOG` and `AGENTBUS_LIVE`. */
export interface SessionReader {
  read(tenant: string, sessionId: string, options?: { signal?: AbortSignal }): Promise<SessionRead>;
  /** Sessions that have a log, at most `limit` (default 500). */
  list(options?: { limit?: number }): Promise<{ sessions: SessionListEntry[]; total: number }>;
}

/**
 * Creates the reader. `maxLive` bounds the live events read per session (default 20 000); past it, the session's
 * deltas are left out and each other live type is read whole, its newest `maxLive` kept, so the newest states come.
 */
export function createSessionReader(deps: {
  log: SessionLog;
  js: JetStreamClient;
  jsm: JetStreamManager;
  subjects: Subjects;
  codec: Codec;
  streams: { log: string; live: string };
  logger: Logger;
  timeoutMs?: number;
  maxLive?: number;
}): SessionReader {
  const timeoutMs = deps.timeoutMs ?? 10_000;
  const maxLive = deps.maxLive ?? 20_000;

  /**
   * Events of one filter with their stream sequences, oldest first: the first `total` of them, or with `newest`
   * all of them read and the newest `total` kept.
   */
  async function readFiltered(filter: string, total: number, signal: AbortSignal, newest = false): Promise<Array<{ seq: number; event: AgentEvent }>> {
    const consumer = await deps.js.consumers.get(deps.streams.live, { filter_subjects: filter, deliver_policy: DeliverPolicy.All });
    const events: Array<{ seq: number; event: AgentEvent }> = [];
    const messages = await consumer.consume();
    const stop = () => void messages.stop();
    signal.addEventListener('abort', stop, { once: true });
    let seen = 0;
    try {
      for await (const message of messages) {
        seen += 1;
        try {
          events.push({ seq: message.seq, event: decodeSessionEvent(deps.codec, deps.subjects, message) });
          // Cut back now and then rather than per message: a shift per event would cost the whole list each time.
          if (newest && events.length >= 2 * total) events.splice(0, events.length - total);
        } catch (err) {
          deps.logger.debug({ err, subject: message.subject }, 'skipped a live message that is not a valid event');
        }
        if ((!newest && seen >= total) || message.info.pending === 0) break;
      }
    } finally {
      signal.removeEventListener('abort', stop);
      await messages.close().catch(() => undefined);
    }
    return newest ? events.slice(-total) : events;
  }

  async function readLive(tenant: string, sessionId: string, signal: AbortSignal): Promise<AgentEvent[]> {
    const filter = `${deps.subjects.prefix}.${tenant}.sessions.${sessionId}.live.>`;
    const info = await deps.jsm.streams.info(deps.streams.live, { subjects_filter: filter });
    const counts = Object.entries(info.state.subjects ?? {});
    const total = counts.reduce((sum, [, count]) => sum + count, 0);
    if (total === 0) return [];
    if (total <= maxLive) return (await readFiltered(filter, total, signal)).map(({ event }) => event);
    // More than the bound, and deltas are nearly all of it: a read from the start would stop among old deltas and
    // miss the newest state changes. Read every other type on its own (each bounded), and no deltas: the log's
    // assistant messages hold the text they made.
    const others = counts.filter(([subject]) => !subject.endsWith(`.live.${LiveEventType.assistantDelta}`));
    deps.logger.debug({ tenant, sessionId, total, maxLive }, 'a session has more live events than the dashboard reads: its deltas are left out');
    const read = await Promise.all(others.map(([subject, count]) => readFiltered(subject, Math.min(count, maxLive), signal, true)));
    return read
      .flat()
      .sort((a, b) => a.seq - b.seq)
      .map(({ event }) => event);
  }

  return {
    async read(tenant, sessionId, options = {}) {
      const signal = options.signal ? AbortSignal.any([options.signal, AbortSignal.timeout(timeoutMs)]) : AbortSignal.timeout(timeoutMs);
      // A fork's log starts with what it inherits from its parents (read by reference), as the runtime reads it.
      const [log, live] = await Promise.all([readSessionHistory(deps.log, tenant, sessionId, { signal }), readLive(tenant, sessionId, signal)]);
      if (signal.aborted) {
        if (options.signal?.aborted) throw abortReason(options.signal);
        throw new TimeoutError(`reading ${tenant}/${sessionId} took over ${timeoutMs} ms`, timeoutMs);
      }
      return { tenant, sessionId, log: log.events, live };
    },
    async list(options = {}) {
      const limit = options.limit ?? 500;
      const info = await deps.jsm.streams.info(deps.streams.log, { subjects_filter: deps.subjects.anyLog() });
      const sessions: SessionListEntry[] = [];
      for (const [subject, events] of Object.entries(info.state.subjects ?? {})) {
        const where = deps.subjects.parseSession(subject);
        if (where) sessions.push({ tenant: where.tenant, sessionId: where.sessionId, events });
      }
      return { sessions: sessions.slice(0, limit), total: sessions.length };
    },
  };
}
