import type { Msg, MsgHdrs, NatsConnection } from '@nats-io/nats-core';
import { createMemoryClient } from '../bus/memory-client.ts';
import type { MemoryClient } from '../bus/memory-client.ts';
import { createReplyMux } from '../bus/reply-mux.ts';
import { createStateClient } from '../bus/state-client.ts';
import type { StateClient } from '../bus/state-client.ts';
import { msgpackHeaders, request } from '../bus/request.ts';
import { AgentbusError, ErrorCode, NoRespondersError } from '../errors.ts';
import { contentTypeOf, MAX_DEADLINE_MS, MAX_HISTORY_LIMIT, SessionVerb, TraceHeader, assertToken, createCodec, createSubjects, fromErrorData } from '../protocol/index.ts';
import type {
  Approve,
  InputAnswer,
  Codec,
  CommandReply,
  DeleteReply,
  ForkReply,
  ForkRequest,
  EventDataMap,
  Prompt,
  PromptReply,
  SessionHistoryReply,
  SessionHistoryRequest,
  SessionsListReply,
  SessionsListRequest,
  Subjects,
  TraceContext,
} from '../protocol/index.ts';
import { openCoreWatch } from './core-watch.ts';
import { EventReader, detectEventReader } from './event-reader.ts';
import { openWatch } from './event-stream.ts';
import type { EventWatch, WatchOptions } from './event-stream.ts';
import type { SkippedMessage, StreamedEvent } from './streamed-event.ts';

/** One session of one tenant. */
export interface SessionTarget {
  readonly tenant: string;
  readonly sessionId: string;
}

/** How a turn ended, as its `turn.ended` event says. */
export type TurnEnded = EventDataMap['turn.ended'] & { readonly turnId: string };

/** The iterator's next result, or undefined when none comes within `ms`. */
async function nextWithin<T>(iterator: AsyncIterator<T>, ms: number): Promise<IteratorResult<T> | undefined> {
  let timer: ReturnType<typeof setTimeout> | undefined;
  const timeout = new Promise<undefined>((resolve) => {
    timer = setTimeout(() => resolve(undefined), ms);
  });
  try {
    return await Promise.race([iterator.next(), timeout]);
  } finally {
    clearTimeout(timer);
  }
}

/** Options of {@link AgentbusClient.ask}. */
export interface AskOptions {
  /** Stops waiting, and cancels the turn if it is running by then (a turn still queued ends at its deadline, if any). */
  readonly signal?: AbortSignal;
  /** Every event of the turn, in order per stream; `turn.ended` comes last, after the turn's last delta. */
  readonly onEvent?: (event: StreamedEvent) => void;
  /** Hears each message on the session's subjects that was skipped because it is not a valid event. */
  readonly onInvalid?: (skipped: SkippedMessage) => void;
  /** Called once the prompt is accepted. */
  readonly onAccepted?: (turnId: string) => void;
  /**
   * Longest wait for the whole turn. Sent as the prompt's `deadlineMs` (unless it names one), so the runtime ends the
   * turn `deadline_exceeded` by then; when the wait runs out first, the running turn is cancelled too.
   */
  readonly timeoutMs?: number;
  /** While no runtime answers (one may be starting), send the prompt again for this long. Default 0. */
  readonly readyTimeoutMs?: number;
  /** The caller's W3C trace context: the turn's spans join that trace (tracing on). */
  readonly trace?: TraceContext;
}

/** Options of one request: an AbortSignal and the longest wait for the reply. */
export interface CallOptions {
  readonly signal?: AbortSignal;
  readonly timeoutMs?: number;
}

/** What a delete did: log messages purged; `alreadyDeleted` when an earlier delete had done it. */
export interface DeletedSession {
  readonly purged: number;
  readonly alreadyDeleted: boolean;
}

/** What a fork made: the new session, and the sequence of the source's history it inherits through. */
export interface ForkedSession {
  readonly sessionId: string;
  readonly atSeq: number;
}

/** The public SDK for talking to agentbus sessions over NATS. */
export interface AgentbusClient {
  /**
   * Sends a prompt; resolves with the turn id once the runtime logged it. Throws when it is refused. `trace`: the
   * caller's W3C trace context, sent as the `traceparent`/`tracestate` headers: with tracing on, the turn's spans
   * join that trace.
   */
  prompt(target: SessionTarget, prompt: Prompt, options?: { signal?: AbortSignal; timeoutMs?: number; trace?: TraceContext }): Promise<{ turnId: string }>;
  cancel(target: SessionTarget, reason?: string, options?: { signal?: AbortSignal; timeoutMs?: number }): Promise<CommandReply>;
  steer(target: SessionTarget, text: string, options?: { signal?: AbortSignal; timeoutMs?: number }): Promise<CommandReply>;
  /**
   * Decides on a privileged call awaiting approval: `{ toolCallId, approved, reason? }`, `{ toolCallId, approved: true,
   * args }` (edited arguments) or `{ toolCallId, respond }` (a text result in the tool's place).
   */
  approve(target: SessionTarget, decision: Approve, options?: { signal?: AbortSignal; timeoutMs?: number }): Promise<CommandReply>;
  /** Answers the open question (`tool.input_requested`) of a suspended tool call: `{ toolCallId, requestId?, answer }`. */
  input(target: SessionTarget, answer: InputAnswer, options?: { signal?: AbortSignal; timeoutMs?: number }): Promise<CommandReply>;
  /**
   * Follows a session's events (`sessionId: '*'` for a whole tenant); resumable with `from`. Messages that
   * are not valid events of the session are skipped (`onInvalid` hears them). Through JetStream where the
   * connection has it; otherwise (a tenant in an account of its own) by subscription, the log resumed through
   * memory's `history` ({@link openCoreWatch}).
   */
  watch(target: SessionTarget, options?: WatchOptions): Promise<EventWatch>;
  /** How this client reads events: asked of the server once (`$JS.API.INFO`), unless given when it was created. */
  eventReader(options?: CallOptions): Promise<EventReader>;
  /**
   * Sends a prompt and follows its turn to the end: `onEvent` sees each event of the turn (deltas,
   * progress, tool calls, …). Resolves with `turn.ended`: with a prompt's `outputSchema`, its `output` is the final
   * answer parsed and validated against it (a turn whose answer never matched ends `failed`, `output_invalid`). `timeoutMs` is the turn's deadline too; when the wait ends
   * early (timeout or signal) once the turn has started, the turn is cancelled (`cancel`), so that it spends no more.
   */
  ask(target: SessionTarget, prompt: Prompt, options?: AskOptions): Promise<TurnEnded>;
  /** A page of a tenant's sessions, oldest first (the memory service answers); pass `nextPageToken` on for the next. */
  listSessions(tenant: string, query?: SessionsListRequest, options?: CallOptions): Promise<SessionsListReply>;
  /**
   * A page of a session's logged events, oldest first, each with its `seq` (the memory service reads them from
   * the log); pass `nextAfterSeq` as `afterSeq` for the next. Throws `not_found` or `session_deleted`.
   */
  history(target: SessionTarget, query?: SessionHistoryRequest, options?: CallOptions): Promise<SessionHistoryReply>;
  /**
   * Deletes a session: its log, its memory and its lease; its id is refused from then on. Throws `busy` while a
   * turn runs or waits (cancel it first), `not_found` for a session that never existed.
   */
  deleteSession(target: SessionTarget, options?: CallOptions): Promise<DeletedSession>;
  /**
   * Forks a session into a new one whose history is the source's up to `atSeq` (default: its end), cut back to the
   * last point where every turn had ended; the new session takes prompts like any other. Throws `invalid_input` for
   * an `atSeq` that is no event of the source, `not_found`, `session_deleted`, or `conflict` for a `sessionId` in use.
   *
   * @example
   * const { sessionId } = await client.forkSession({ tenant: 'acme', sessionId: 'chat-1' }, { atSeq: 42 });
   */
  forkSession(target: SessionTarget, request?: ForkRequest, options?: CallOptions): Promise<ForkedSession>;
  /**
   * A tenant's agent state (the memory service keeps it in JetStream KV): `save(key, value)`, `load(key)`,
   * `delete(key)`, each with a timeout and an AbortSignal.
   */
  state(tenant: string): StateClient;
}

/**
 * Creates the client SDK on a NATS connection.
 *
 * @example
 * const client = createAgentbusClient({ nc });
 * const ended = await client.ask({ tenant: 'default', sessionId: 'chat-1' }, { text: 'hello' }, {
 *   onEvent: ({ event }) => event.type === 'assistant.delta' && process.stdout.write(event.data.text),
 * });
 */
export function createAgentbusClient(options: { nc: NatsConnection; prefix?: string; codec?: Codec; eventReader?: EventReader }): AgentbusClient {
  const { nc } = options;
  const codec = options.codec ?? createCodec();
  const subjects: Subjects = createSubjects(options.prefix);
  const replies = createReplyMux(nc);
  let memory: MemoryClient | undefined;
  const memoryClient = () => (memory ??= createMemoryClient({ nc, codec, replies, ...(options.prefix ? { prefix: options.prefix } : {}) }));
  // Asked once; a failed ask (a timeout) is asked again next time.
  let reader: Promise<EventReader> | undefined = options.eventReader ? Promise.resolve(options.eventReader) : undefined;
  const eventReader = (callOptions: CallOptions = {}): Promise<EventReader> => {
    reader ??= detectEventReader(nc, codec, callOptions).catch((error: unknown) => {
      reader = undefined;
      throw error;
    });
    return reader;
  };
  const watchEvents = async (target: SessionTarget, watchOptions: WatchOptions = {}): Promise<EventWatch> => {
    const how = await eventReader(watchOptions.signal ? { signal: watchOptions.signal } : {});
    if (how === EventReader.jetstream) return openWatch({ nc, subjects, codec }, target, watchOptions);
    const readHistory = (sessionId: string, afterSeq: number, signal: AbortSignal | undefined) =>
      memoryClient().history(target.tenant, sessionId, { afterSeq, limit: MAX_HISTORY_LIMIT }, signal ? { signal } : {});
    return openCoreWatch({ nc, subjects, codec, readHistory }, target, watchOptions);
  };

  async function send<R>(target: SessionTarget, verb: SessionVerb, body: unknown, callOptions: { signal?: AbortSignal; timeoutMs?: number; trace?: TraceContext } = {}): Promise<R> {
    assertToken(target.tenant, 'tenant');
    assertToken(target.sessionId, 'sessionId');
    const subject = subjects.session(target.tenant, target.sessionId, verb);
    // request() sends msgpack headers and rejects with our error classes.
    let reply: Msg;
    try {
      reply = await request(nc, subject, codec.encode(body), {
        replies,
        timeoutMs: callOptions.timeoutMs ?? 10_000,
        ...(callOptions.signal ? { signal: callOptions.signal } : {}),
        ...(callOptions.trace ? { headers: traceHeaders(callOptions.trace) } : {}),
      });
    } catch (error) {
      if (error instanceof NoRespondersError) {
        throw new AgentbusError(error.code, `no agentbus runtime answers on ${subject}`, { retryable: true, cause: error });
      }
      throw error;
    }
    return codec.decode(reply.data, contentTypeOf(reply)) as R;
  }

  async function promptWhenReady(target: SessionTarget, prompt: Prompt, readyTimeoutMs: number, signal: AbortSignal | undefined, trace?: TraceContext): Promise<{ turnId: string }> {
    const deadline = Date.now() + readyTimeoutMs;
    for (;;) {
      try {
        return await client.prompt(target, prompt, { ...(signal ? { signal } : {}), ...(trace ? { trace } : {}) });
      } catch (error) {
        const starting = error instanceof AgentbusError && error.code === ErrorCode.noResponders && Date.now() < deadline;
        if (!starting) throw error;
        await new Promise((resolve) => setTimeout(resolve, 250));
      }
    }
  }

  /** Cancels the turn an `ask` gave up on; a cancel that fails (the turn ended meanwhile) is not the caller's error. */
  async function cancelGivenUp(target: SessionTarget): Promise<void> {
    try {
      await client.cancel(target, 'the client stopped waiting for this turn', { timeoutMs: 2000 });
    } catch {
      // Best effort: the deadline sent with the prompt ends the turn anyway.
    }
  }

  const client: AgentbusClient = {
    async prompt(target, prompt, callOptions) {
      const reply = await send<PromptReply>(target, SessionVerb.prompt, prompt, callOptions);
      if (!reply.accepted || !reply.turnId) throw reply.error ? fromErrorData(reply.error) : new AgentbusError('internal', 'prompt refused without a reason');
      return { turnId: reply.turnId };
    },
    cancel: (target, reason, callOptions) => send(target, SessionVerb.cancel, reason === undefined ? {} : { reason }, callOptions),
    steer: (target, text, callOptions) => send(target, SessionVerb.steer, { text }, callOptions),
    approve: (target, decision, callOptions) => send(target, SessionVerb.approve, decision, callOptions),
    input: (target, answer, callOptions) => send(target, SessionVerb.input, answer, callOptions),
    watch: async (target, watchOptions) => {
      assertToken(target.tenant, 'tenant');
      if (target.sessionId !== '*') assertToken(target.sessionId, 'sessionId');
      return watchEvents(target, watchOptions);
    },
    eventReader,
    listSessions: (tenant, query, callOptions) => memoryClient().listSessions(tenant, query, callOptions),
    state: (tenant) => {
      assertToken(tenant, 'tenant');
      return createStateClient({ nc, codec, tenant, replies, ...(options.prefix ? { prefix: options.prefix } : {}) });
    },
    history: (target, query, callOptions) => memoryClient().history(target.tenant, target.sessionId, query, callOptions),

    async deleteSession(target, callOptions) {
      const reply = await send<DeleteReply>(target, SessionVerb.delete, {}, callOptions);
      if (!reply.ok) throw fromErrorData(reply.error);
      return { purged: reply.purged, alreadyDeleted: reply.alreadyDeleted === true };
    },

    async forkSession(target, request = {}, callOptions) {
      const reply = await send<ForkReply>(target, SessionVerb.fork, request, callOptions);
      if (!reply.ok) throw fromErrorData(reply.error);
      return { sessionId: reply.sessionId, atSeq: reply.atSeq };
    },

    async ask(target, prompt, askOptions = {}) {
      const signals = [...(askOptions.signal ? [askOptions.signal] : [])];
      if (askOptions.timeoutMs !== undefined) signals.push(AbortSignal.timeout(askOptions.timeoutMs));
      const signal = signals.length > 0 ? AbortSignal.any(signals) : undefined;
      // Watch before sending, so no event of the turn is missed; events before the reply wait in the watch.
      const watch = await watchEvents(target, {
        ...(signal ? { signal } : {}),
        ...(askOptions.onInvalid ? { onInvalid: askOptions.onInvalid } : {}),
      });
      const withDeadline =
        askOptions.timeoutMs !== undefined && prompt.deadlineMs === undefined
          ? { ...prompt, deadlineMs: Math.min(MAX_DEADLINE_MS, Math.max(1, Math.ceil(askOptions.timeoutMs))) }
          : prompt;
      // Set once an event says this turn is the session's running one: only then may giving up cancel it (a cancel
      // names no turn, and would stop the turn ahead of a queued one).
      let runningTurnId: string | undefined;
      // The turn's `turn.ended`, held back so `onEvent` hears it last.
      let endedEvent: StreamedEvent | undefined;
      try {
        const { turnId } = await promptWhenReady(target, withDeadline, askOptions.readyTimeoutMs ?? 0, signal, askOptions.trace);
        askOptions.onAccepted?.(turnId);
        const iterator = watch[Symbol.asyncIterator]();
        let settleBy = 0;
        for (;;) {
          // Once the turn has ended, keep taking events only until the live stream has caught up.
          const next = endedEvent ? await nextWithin(iterator, Math.max(0, settleBy - Date.now())) : await iterator.next();
          if (next === undefined || next.done) break;
          const streamed = next.value;
          if (streamed.event.turnId === turnId) {
            if (streamed.event.type !== 'user.message') runningTurnId = turnId;
            if (streamed.event.type === 'turn.ended') {
              endedEvent = streamed;
              settleBy = Date.now() + 2000;
            } else {
              askOptions.onEvent?.(streamed);
            }
          }
          if (endedEvent && (await watch.drained())) break;
        }
        if (endedEvent?.event.type !== 'turn.ended') throw new AgentbusError('internal', 'the event stream ended before the turn did');
        askOptions.onEvent?.(endedEvent);
        return { ...endedEvent.event.data, turnId };
      } catch (error) {
        if (runningTurnId !== undefined && endedEvent === undefined && signal?.aborted) await cancelGivenUp(target);
        throw error;
      } finally {
        await watch.close();
      }
    },
  };
  return client;
}

/** msgpack headers carrying a W3C trace context. */
function traceHeaders(trace: TraceContext): MsgHdrs {
  const headers = msgpackHeaders();
  headers.set(TraceHeader.traceparent, trace.traceparent);
  if (trace.tracestate) headers.set(TraceHeader.tracestate, trace.tracestate);
  return headers;
}
