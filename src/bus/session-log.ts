import { DeliverPolicy, JetStreamApiError } from '@nats-io/jetstream';
import type { JetStreamClient, JetStreamManager } from '@nats-io/jetstream';
import { LogConflictError, TimeoutError, abortReason } from '../errors.ts';
import { isLogEventType } from '../protocol/index.ts';
import type { Codec, LogEvent, Subjects } from '../protocol/index.ts';
import { msgpackHeaders } from './request.ts';

const WRONG_LAST_SEQUENCE = 10071;

/** The durable log of sessions: appends with a single writer per session, and reads back. */
export interface SessionLog {
  /**
   * Appends one event. `expectedSeq` is the stream sequence of the session's last event (0 for none);
   * the append fails with {@link LogConflictError} if another writer moved it. The event id is the
   * `Nats-Msg-Id`, so a retried append is deduplicated. Returns the new sequence.
   */
  append(event: LogEvent, expectedSeq: number, options?: { signal?: AbortSignal }): Promise<number>;
  /**
   * Appends events of one session in order without waiting for each acknowledgement: the first carries
   * `expectedSeq` (so a second writer is caught there), the rest follow on the same connection, and the acks
   * are awaited together. Resolves with each event's sequence; rejects with the first failure, after
   * `onStored` was called for every event stored before it (in order).
   */
  appendGroup(events: readonly LogEvent[], expectedSeq: number, onStored: (index: number, seq: number) => void): Promise<void>;
  /** Reads every event of a session in order, each with its `seq`. */
  read(tenant: string, sessionId: string, options?: { signal?: AbortSignal; timeoutMs?: number }): Promise<LogEvent[]>;
  /** The sequence of the session's last event, 0 when it has none. */
  lastSeq(tenant: string, sessionId: string): Promise<number>;
}

/**
 * Creates the session log over the `AGENTBUS_LOG` stream (see `ensureStreams`).
 *
 * @example
 * const log = createSessionLog({ js, jsm, subjects, codec, stream: 'AGENTBUS_LOG' });
 * const seq = await log.append(event, lastSeq);
 */
export function createSessionLog(deps: {
  js: JetStreamClient;
  jsm: JetStreamManager;
  subjects: Subjects;
  codec: Codec;
  stream: string;
  appendTimeoutMs?: number;
}): SessionLog {
  const { js, jsm, subjects, codec, stream } = deps;
  const appendTimeoutMs = deps.appendTimeoutMs ?? 10_000;

  async function lastSeq(tenant: string, sessionId: string): Promise<number> {
    try {
      const message = await jsm.streams.getMessage(stream, { last_by_subj: subjects.log(tenant, sessionId) });
      return message?.seq ?? 0;
    } catch (error) {
      if (error instanceof Error && /no message found|not found/i.test(error.message)) return 0;
      throw error;
    }
  }

  async function publish(event: LogEvent, expectedSeq: number | undefined): Promise<number> {
    const subject = subjects.log(event.tenant, event.sessionId);
    try {
      const ack = await js.publish(subject, codec.encode(event), {
        msgID: event.id,
        ...(expectedSeq === undefined ? {} : { expect: { lastSubjectSequence: expectedSeq } }),
        timeout: appendTimeoutMs,
        headers: msgpackHeaders(),
      });
      return ack.seq;
    } catch (error) {
      if (expectedSeq !== undefined && error instanceof JetStreamApiError && error.code === WRONG_LAST_SEQUENCE) {
        throw new LogConflictError(event.sessionId, expectedSeq, { cause: error });
      }
      throw error;
    }
  }

  return {
    async append(event, expectedSeq, options = {}) {
      options.signal?.throwIfAborted();
      return publish(event, expectedSeq);
    },

    async appendGroup(events, expectedSeq, onStored) {
      const acks = events.map((event, index) => publish(event, index === 0 ? expectedSeq : undefined));
      let failure: unknown;
      for (const [index, ack] of acks.entries()) {
        try {
          const seq = await ack;
          if (failure === undefined) onStored(index, seq);
        } catch (error) {
          failure ??= error;
        }
      }
      if (failure !== undefined) throw failure;
    },

    async read(tenant, sessionId, options = {}) {
      const timeoutMs = options.timeoutMs ?? 30_000;
      const signal = options.signal ? AbortSignal.any([options.signal, AbortSignal.timeout(timeoutMs)]) : AbortSignal.timeout(timeoutMs);
      const last = await lastSeq(tenant, sessionId);
      if (last === 0) return [];
      const consumer = await js.consumers.get(stream, {
        filter_subjects: subjects.log(tenant, sessionId),
        deliver_policy: DeliverPolicy.All,
      });
      const events: LogEvent[] = [];
      const messages = await consumer.consume();
      const stop = () => void messages.stop();
      signal.addEventListener('abort', stop, { once: true });
      try {
        for await (const message of messages) {
          const value = codec.decode(message.data, message.headers?.get('Content-Type')) as LogEvent;
          if (value && typeof value === 'object' && isLogEventType(value.type)) events.push({ ...value, seq: message.seq });
          if (message.seq >= last) break;
        }
      } finally {
        signal.removeEventListener('abort', stop);
        await messages.close().catch(() => undefined);
      }
      if (signal.aborted) {
        if (options.signal?.aborted) throw abortReason(options.signal);
        throw new TimeoutError(`reading the log of ${tenant}/${sessionId} took over ${timeoutMs} ms`, timeoutMs);
      }
      return events;
    },

    lastSeq,
  };
}
