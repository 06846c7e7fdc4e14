import type { NatsConnection } from '@nats-io/nats-core';
import { z } from 'zod';
import { fromErrorData } from '../errors.ts';
import { contentTypeOf, EMBED_TIMEOUT_HEADER, createHistorySubjects, createMemorySubjects, logEventSchema, MemoryEventType } from '../protocol/index.ts';
import type {
  Codec,
  MemorySearchReply,
  MemorySearchRequest,
  SessionHistoryReply,
  SessionHistoryRequest,
  SessionsListReply,
  SessionsListRequest,
} from '../protocol/index.ts';
import { GenAiOperation, traceMemoryCall } from '../telemetry/index.ts';
import type { RequestTrace } from '../telemetry/index.ts';
import { createReplyMux } from './reply-mux.ts';
import type { ReplyMux } from './reply-mux.ts';
import { msgpackHeaders, request } from './request.ts';

/** Options of {@link createMemoryClient}. */
export interface MemoryClientOptions {
  readonly nc: NatsConnection;
  readonly codec: Codec;
  /** Subject prefix; default `agentbus`. */
  readonly prefix?: string;
  readonly replies?: ReplyMux;
}

/** Options of one memory request. */
export interface MemoryRequestOptions {
  readonly signal?: AbortSignal;
  /** Default 5 s. */
  readonly timeoutMs?: number;
  /** The turn the request is made for: with tracing on, a search is traced as a child of that turn's step. */
  readonly turnId?: string;
}

/** Asks the memory service, for one tenant at a time. Errors come back as the typed errors of `src/errors.ts`. */
export interface MemoryClient {
  search(tenant: string, query: MemorySearchRequest, options?: MemoryRequestOptions): Promise<MemorySearchReply>;
  listSessions(tenant: string, query?: SessionsListRequest, options?: MemoryRequestOptions): Promise<SessionsListReply>;
  /** A page of one session's log (`agentbus.<t>.sessions.<sid>.history`); `not_found` or `session_deleted` when there is none. */
  history(tenant: string, sessionId: string, query?: SessionHistoryRequest, options?: MemoryRequestOptions): Promise<SessionHistoryReply>;
}

const errorReply = z.object({ error: z.object({ code: z.string(), message: z.string(), retryable: z.boolean() }) });
const searchReply = z.object({
  hits: z.array(
    z.object({
      sessionId: z.string(),
      seq: z.number(),
      type: z.enum([MemoryEventType.userMessage, MemoryEventType.assistantMessage, MemoryEventType.toolResult, MemoryEventType.summaryCreated]),
      text: z.string(),
      score: z.number(),
      ts: z.number(),
    }),
  ),
  mode: z.enum(['full-text', 'hybrid']),
  note: z.string().optional(),
});
const listReply = z.object({
  sessions: z.array(
    z.object({ sessionId: z.string(), createdAt: z.number(), lastActivityAt: z.number(), turns: z.number(), cost: z.number(), lastSeq: z.number().optional(), lastText: z.string().optional(), forkedFrom: z.object({ sessionId: z.string(), seq: z.number() }).optional() }),
  ),
  nextPageToken: z.string().optional(),
});
const historyReply = z.object({
  // Each event with the stream sequence memory read it at.
  events: z.array(z.intersection(logEventSchema, z.object({ seq: z.number().int().positive() }))),
  nextAfterSeq: z.number().int().positive().optional(),
});

/**
 * A client of `agentbus.<t>.memory.search`, `agentbus.<t>.sessions.list` and `agentbus.<t>.sessions.<sid>.history`.
 *
 * @example
 * const memory = createMemoryClient({ nc, codec });
 * const { hits } = await memory.search('acme', { query: 'favourite fruit', k: 3 }, { timeoutMs: 300, signal });
 */
export function createMemoryClient(options: MemoryClientOptions): MemoryClient {
  const { nc, codec } = options;
  const subjects = createMemorySubjects(options.prefix);
  const historySubjects = createHistorySubjects(options.prefix);
  const replies = options.replies ?? createReplyMux(nc);
  const ask = async <S extends z.ZodType>(subject: string, body: unknown, schema: S, requestOptions: MemoryRequestOptions, trace?: RequestTrace): Promise<z.infer<S>> => {
    const timeoutMs = requestOptions.timeoutMs ?? 5_000;
    // The caller's wait goes along (the header embed requests use too): memory answers within it with what it has.
    const headers = msgpackHeaders();
    headers.set(EMBED_TIMEOUT_HEADER, String(timeoutMs));
    const asked = request(nc, subject, codec.encode(body), {
      timeoutMs,
      headers: trace ? trace.inject(headers) : headers,
      replies,
      ...(requestOptions.signal ? { signal: requestOptions.signal } : {}),
    });
    const reply = await (trace ? trace.settle(asked) : asked);
    const value = codec.decode(reply.data, contentTypeOf(reply));
    const failure = errorReply.safeParse(value);
    if (failure.success) throw fromErrorData(failure.data.error);
    return codec.validate(schema, value, `reply of ${subject}`);
  };
  return {
    search: (tenant, query, requestOptions = {}) =>
      ask(subjects.search(tenant), query, searchReply, requestOptions, traceMemoryCall(GenAiOperation.searchMemory, { tenant, turnId: requestOptions.turnId })),
    listSessions: (tenant, query = {}, requestOptions = {}) => ask(subjects.sessionsList(tenant), query, listReply, requestOptions),
    history: async (tenant, sessionId, query = {}, requestOptions = {}) => {
      const reply = await ask(historySubjects.history(tenant, sessionId), query, historyReply, requestOptions);
      return reply as SessionHistoryReply;
    },
  };
}
