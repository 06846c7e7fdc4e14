import { DeliverPolicy } from '@nats-io/jetstream';
import type { JetStreamClient, JsMsg } from '@nats-io/jetstream';
import { headers as createHeaders, nuid } from '@nats-io/nats-core';
import type { NatsConnection } from '@nats-io/nats-core';
import { AgentbusError, ErrorCode, InvalidInputError, LogConflictError, NoRespondersError, PayloadTooLargeError, QuotaExceededError, TimeoutError, abortReason } from '../errors.ts';
import type { Logger } from '../logging.ts';
import { contentTypeOf, ContentType, logEventSchema } from '../protocol/index.ts';
import type { Codec, LogEvent, Subjects } from '../protocol/index.ts';
import { createReplyMux } from './reply-mux.ts';
import type { ReplyMux } from './reply-mux.ts';
import { presetHeaders } from './encoded-headers.ts';
import { pubAckReader } from './pub-ack.ts';
import { request } from './request.ts';
import { WRONG_LAST_SEQUENCE } from './revision-conflict.ts';

/** A session's log as read back. */
export interface SessionLogRead {
  /** The valid events, in order, each with its `seq`. */
  readonly events: LogEvent[];
  /**
   * The sequence of the last message read (0 for none, or the `after` asked for): past the last event's when
   * messages after it were skipped. The next append expects this sequence.
   */
  readonly lastSeq: number;
  /** True when the read stopped at its `limit` or `maxBytes` before the session's last message. */
  readonly more: boolean;
}

/** Options of {@link SessionLog.appendGroup}. */
export interface AppendGroupOptions {
  /**
   * The event to send again in place of one JetStream refused, under a new id: a clustered server (2.10 and later)
   * keeps the id of a message its replicas refused as "in process" for its duplicate window, and would refuse it
   * again. By default the same event with a new NUID.
   */
  readonly renew?: (event: LogEvent) => LogEvent;
}

/** Options of {@link SessionLog.read}. */
export interface SessionLogReadOptions {
  readonly signal?: AbortSignal;
  /** Longest wait for the whole read; default 30 s. */
  readonly timeoutMs?: number;
  /** Only what was stored past this sequence. */
  readonly after?: number;
  /**
   * The session's last sequence, when the caller asked for it already (`lastSeq`, started in parallel with other
   * reads): the read then starts without asking again.
   */
  readonly last?: Promise<number>;
  /** Stop once this many valid events are read (a page). */
  readonly limit?: number;
  /** Stop before the messages read pass this many bytes (at least one message is read). */
  readonly maxBytes?: number;
  /** Only what was stored up to this sequence (a fork's inherited part of its parent's log). */
  readonly through?: number;
}

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
   * `expectedSeq` as {@link append}'s does (so a second writer is caught there), each later one
   * `Nats-Expected-Last-Msg-Id` with the id of the event before it, so it is stored only right behind that one in
   * the stream: when the first is refused, so is the rest, and no event of a writer that lost the session lands
   * behind another writer's. Where another publisher's message (another session's append) came between two of them,
   * the rest is sent again from there under new ids (`renew`), fenced by the last one's sequence. `onStored` hears
   * each event's sequence, in order, and the event as stored; resolves once all are stored, or rejects with the first
   * failure, after `onStored` was called for every event stored before it (nothing after a refused event is stored).
   */
  appendGroup(
    events: readonly LogEvent[],
    expectedSeq: number,
    onStored: (index: number, seq: number, event: LogEvent) => void,
    options?: AppendGroupOptions,
  ): Promise<void>;
  /**
   * Reads every event of a session in order, each with its `seq`. A message on the session's log subject
   * that is not a valid log event of this session (malformed bytes, wrong shape, another session's event)
   * is skipped and logged at warn: anyone who may publish there must not be able to stop the session.
   * With `after`, only what was stored past that sequence, up to the session's last message now: what a
   * writer whose append was refused looks at (its `lastSeq` is `after` when nothing is). With `limit` or
   * `maxBytes`, a page: `more` says the log goes on past `lastSeq`.
   */
  read(tenant: string, sessionId: string, options?: SessionLogReadOptions): Promise<SessionLogRead>;
  /** The sequence of the session's last event, 0 when it has none. */
  lastSeq(tenant: string, sessionId: string): Promise<number>;
}

/**
 * Creates the session log over the `AGENTBUS_LOG` stream (see `ensureStreams`).
 *
 * @example
 * const log = createSessionLog({ nc, js, subjects, codec, stream: 'AGENTBUS_LOG' });
 * const seq = await log.append(event, lastSeq);
 */
export function createSessionLog(deps: {
  nc: NatsConnection;
  js: JetStreamClient;
  subjects: Subjects;
  codec: Codec;
  stream: string;
  /** Longest wait for an append's acknowledgement or the last-sequence lookup; default 10 s. */
  requestTimeoutMs?: number;
  /** Reply subjects for the acknowledgements; by default the log makes its own mux on `nc`. */
  replies?: ReplyMux;
  /** Where `read` reports the messages it skips. */
  logger?: Logger;
}): SessionLog {
  const { nc, js, subjects, codec, stream } = deps;
  const requestTimeoutMs = deps.requestTimeoutMs ?? 10_000;
  const replies = deps.replies ?? createReplyMux(nc);
  // What every direct get sends but its body: made once per log. nats.js encodes headers at publish, so one
  // headers object serves every request.
  const directGetSubject = `$JS.API.DIRECT.GET.${stream}`;
  const jsonHeaders = createHeaders();
  jsonHeaders.set('Content-Type', ContentType.json);
  const encoder = new TextEncoder();
  const readAck = pubAckReader(codec, stream);

  /**
   * A direct get of the subject's last message (`$JS.API.DIRECT.GET.<stream>`, the stream has `allow_direct`):
   * the server answers with the message and its `Nats-Sequence` header, or a 404 status when there is none.
   * Lighter than the `STREAM.MSG.GET` API (no JSON envelope, no base64, no API audit advisory).
   */
  async function lastSeq(tenant: string, sessionId: string): Promise<number> {
    const body = encoder.encode(JSON.stringify({ last_by_subj: subjects.log(tenant, sessionId) }));
    let reply;
    try {
      reply = await request(nc, directGetSubject, body, { timeoutMs: requestTimeoutMs, headers: jsonHeaders, replies });
    } catch (error) {
      if (error instanceof NoRespondersError) {
        throw new AgentbusError(ErrorCode.noResponders, `no JetStream answers direct gets on ${stream} (is JetStream on, and the stream there with allow_direct?)`, {
          cause: error,
          retryable: true,
        });
      }
      throw error;
    }
    if (reply.headers?.hasError) {
      if (reply.headers.code === 404) return 0;
      throw new AgentbusError(ErrorCode.internal, `reading the last event of ${tenant}/${sessionId} failed: ${reply.headers.code} ${reply.headers.description}`, {
        retryable: reply.headers.code >= 500,
      });
    }
    const seq = Number(reply.headers?.get('Nats-Sequence'));
    if (!Number.isSafeInteger(seq) || seq <= 0) throw new AgentbusError(ErrorCode.internal, `a direct get on ${stream} answered without a sequence`);
    return seq;
  }

  /** The event a log message holds, or undefined (reported) when it holds no valid event of the session. */
  function eventOf(message: JsMsg, tenant: string, sessionId: string): LogEvent | undefined {
    try {
      const value = codec.validate(logEventSchema, codec.decode(message.data, contentTypeOf(message)), 'log event');
      if (value.tenant !== tenant || value.sessionId !== sessionId) {
        throw new InvalidInputError(`invalid log event: an event of ${value.tenant}/${value.sessionId} on the log of ${tenant}/${sessionId}`);
      }
      return { ...value, seq: message.seq };
    } catch (error) {
      if (!(error instanceof InvalidInputError || error instanceof PayloadTooLargeError)) throw error;
      deps.logger?.warn({ err: error, tenant, sessionId, seq: message.seq, subject: message.subject }, 'skipped an invalid message in a session log');
      return undefined;
    }
  }

  /**
   * A JetStream publish as the protocol has it (headers `Nats-Msg-Id` and the guard, a PubAck or an error on the
   * reply subject), the reply taken through the mux: pipelined appends share one subscription and cost no request
   * object each. Resolves with the sequence, or with JetStream's refusal as data; rejects when no answer comes.
   */
  async function send(event: LogEvent, guard: Guard): Promise<number | Refusal> {
    const subject = subjects.log(event.tenant, event.sessionId);
    const headers = presetHeaders([['Content-Type', ContentType.msgpack], ['Nats-Msg-Id', event.id], guard]);
    let reply;
    try {
      reply = await request(nc, subject, codec.encode(event), { timeoutMs: requestTimeoutMs, headers, replies });
    } catch (error) {
      if (error instanceof NoRespondersError) {
        throw new AgentbusError(ErrorCode.noResponders, `no JetStream stream takes ${subject} (is JetStream on, and ${stream} there?)`, { cause: error, retryable: true });
      }
      throw error;
    }
    const ack = readAck(reply.data);
    if (ack.error) return ack.error;
    if (ack.stream !== stream || !ack.seq) {
      throw new AgentbusError(ErrorCode.internal, `an append to ${subject} was acknowledged as ${ack.stream ?? 'no stream'} seq ${ack.seq ?? 'none'}, not by ${stream}`);
    }
    return ack.seq;
  }

  /** The error of a refused append; `expectedSeq` is what its `Nats-Expected-Last-Subject-Sequence` said. */
  function refused(event: LogEvent, expectedSeq: number, refusal: Refusal): Error {
    if (refusal.err_code === WRONG_LAST_SEQUENCE) return new LogConflictError(event.sessionId, expectedSeq, { cause: new Error(refusal.description) });
    return appendRefused(subjects.log(event.tenant, event.sessionId), refusal);
  }

  return {
    async append(event, expectedSeq, options = {}) {
      options.signal?.throwIfAborted();
      const result = await send(event, expectedLastSubjectSequence(expectedSeq));
      if (typeof result !== 'number') throw refused(event, expectedSeq, result);
      return result;
    },

    async appendGroup(events, expectedSeq, onStored, options = {}) {
      // A round sends group[from..] pipelined: the first fenced by the session's last sequence, each later one
      // chained to the one before it. A chain that broke only because another publisher's message came between two
      // of them (another session's append: they share the stream) is sent again from the break, fenced by the
      // sequence of the last one stored. Every round stores at least its first event or throws: at most one per event.
      const group = [...events];
      const renew = options.renew ?? withNewId;
      let from = 0;
      let expected = expectedSeq;
      while (from < group.length) {
        const results = group.slice(from).map((event, offset) =>
          send(event, offset === 0 ? expectedLastSubjectSequence(expected) : expectedLastMessageId(group[from + offset - 1]!.id)),
        );
        let failure: unknown;
        let brokeAt: number | undefined;
        for (const [offset, result] of results.entries()) {
          const index = from + offset;
          try {
            const seq = await result;
            if (failure !== undefined || brokeAt !== undefined) continue;
            if (typeof seq === 'number') {
              onStored(index, seq, group[index]!);
              expected = seq;
            } else if (offset > 0 && seq.err_code === WRONG_LAST_MSG_ID) {
              brokeAt = index;
            } else {
              failure = refused(group[index]!, expected, seq);
            }
          } catch (error) {
            if (brokeAt === undefined) failure ??= error;
          }
        }
        if (failure !== undefined) throw failure;
        if (brokeAt === undefined) return;
        for (let index = brokeAt; index < group.length; index++) group[index] = renew(group[index]!);
        from = brokeAt;
      }
    },

    async read(tenant, sessionId, options = {}) {
      const timeoutMs = options.timeoutMs ?? 30_000;
      const after = options.after ?? 0;
      const signal = options.signal ? AbortSignal.any([options.signal, AbortSignal.timeout(timeoutMs)]) : AbortSignal.timeout(timeoutMs);
      const limit = options.limit ?? Number.POSITIVE_INFINITY;
      const maxBytes = options.maxBytes ?? Number.POSITIVE_INFINITY;
      const timedOut = () => {
        if (options.signal?.aborted) return abortReason(options.signal);
        return new TimeoutError(`reading the log of ${tenant}/${sessionId} took over ${timeoutMs} ms`, timeoutMs);
      };
      const stored = await (options.last ?? lastSeq(tenant, sessionId));
      // The waits before the consumer have bounds of their own; a signal that fired meanwhile ends the read here.
      if (signal.aborted) throw timedOut();
      const last = options.through === undefined ? stored : Math.min(stored, options.through);
      if (last <= after) return { events: [], lastSeq: after, more: false };
      const consumer = await js.consumers.get(stream, {
        filter_subjects: subjects.log(tenant, sessionId),
        ...(after === 0 ? { deliver_policy: DeliverPolicy.All } : { deliver_policy: DeliverPolicy.StartSequence, opt_start_seq: after + 1 }),
      });
      const events: LogEvent[] = [];
      let through = after;
      let bytes = 0;
      let pastEnd = false;
      // A page pulls no more than it may hand out.
      const messages = await consumer.consume(Number.isFinite(limit) ? { max_messages: Math.min(limit, 100) } : {});
      const stop = () => void messages.stop();
      signal.addEventListener('abort', stop, { once: true });
      // A listener added to a signal that already fired is never called.
      if (signal.aborted) stop();
      try {
        for await (const message of messages) {
          // Past `through` (the session's last message may be after it): nothing more is wanted.
          if (message.seq > last) {
            pastEnd = true;
            break;
          }
          bytes += message.data.byteLength;
          // The message that would pass the byte bound is left for the next page, unless it is the page's first.
          if (bytes > maxBytes && through > after) break;
          const event = eventOf(message, tenant, sessionId);
          if (event) events.push(event);
          through = message.seq;
          if (message.seq >= last || events.length >= limit) break;
        }
      } finally {
        signal.removeEventListener('abort', stop);
        await messages.close().catch(() => undefined);
      }
      if (signal.aborted) throw timedOut();
      return { events, lastSeq: through, more: !pastEnd && through < last };
    },

    lastSeq,
  };
}

/** The event under a new id (a NUID, as the runtime's envelopes have). */
function withNewId(event: LogEvent): LogEvent {
  return { ...event, id: nuid.next() };
}

/** JetStream's answer to an append it refused. */
type Refusal = { readonly code: number; readonly err_code?: number | undefined; readonly description: string };

/** The header that makes an append conditional: on the session's last sequence, or on the stream's last message. */
type Guard = readonly [key: string, value: string];

/** Stored only if the session's last message (its log subject's) has this sequence (0: none): the single writer's fence. */
function expectedLastSubjectSequence(seq: number): Guard {
  return ['Nats-Expected-Last-Subject-Sequence', String(seq)];
}

/**
 * Stored only if the stream's last message has this `Nats-Msg-Id`: the event just before it in a group, so a later
 * event of a group is stored only right behind the one before it, hence only if the group's first passed its fence.
 */
function expectedLastMessageId(id: string): Guard {
  return ['Nats-Expected-Last-Msg-Id', id];
}

/** JetStream's error code for an append whose `Nats-Expected-Last-Msg-Id` is not the stream's last message's id. */
const WRONG_LAST_MSG_ID = 10070;

/** JetStream's error codes of an append past the log's limits (see `ensureStreams`). */
const MESSAGE_TOO_LARGE = 10054;
const STORE_LIMIT = 10077;

/**
 * The error of an append JetStream refused: `payload_too_large` for an event over the stream's `max_msg_size`,
 * `quota_exceeded` for a full log or session (discard new: the append fails rather than history going), else
 * `internal`. None of those is retried: retrying does not make room.
 */
function appendRefused(subject: string, error: { code: number; err_code?: number | undefined; description: string }): AgentbusError {
  const message = `JetStream refused an append to ${subject}: ${error.description} (${error.err_code ?? error.code})`;
  if (error.err_code === MESSAGE_TOO_LARGE) return new AgentbusError(ErrorCode.payloadTooLarge, `${message}; see AGENTBUS_LOG_MAX_EVENT_BYTES`);
  if (error.err_code === STORE_LIMIT && /maximum (bytes|messages)/i.test(error.description)) {
    return new QuotaExceededError(`${message}; see AGENTBUS_LOG_MAX_BYTES and AGENTBUS_LOG_MAX_SESSION_EVENTS`);
  }
  return new AgentbusError(ErrorCode.internal, message, { retryable: error.code >= 500 });
}
