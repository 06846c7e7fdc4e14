import type { Msg, NatsConnection, Subscription } from '@nats-io/nats-core';
import type { z } from 'zod';
import { ErrorCode, toErrorData } from '../errors.ts';
import type { ErrorData } from '../errors.ts';
import type { Logger } from '../logging.ts';
import { cancelRequestSchema, contentTypeOf } from '../protocol/index.ts';
import type { CancelAck, CancelRequest, Codec } from '../protocol/index.ts';
import type { RefusalLog } from '../refusal-log.ts';
import { traceEndpointServed } from '../telemetry/index.ts';
import type { ReplyGuard } from './reply-guard.ts';
import { msgpackHeaders } from './request.ts';
import type { EndpointOutcome } from './service-registry.ts';

/**
 * What a handler returns to answer nothing: a broadcast request (a cancel every instance hears) that is another
 * instance's to answer.
 */
export const NO_REPLY: unique symbol = Symbol('no reply');

/** Where an endpoint's requests are counted for `$SRV.STATS`: a `ServiceRegistration`. */
export interface EndpointStats {
  record(endpoint: string, outcome: EndpointOutcome): void;
}

/** Options of {@link serveEndpoint}. */
export interface ServeEndpointOptions<S extends z.ZodType> {
  readonly nc: NatsConnection;
  readonly codec: Codec;
  readonly logger: Logger;
  /** The endpoint's name: its `$SRV` stats entry and the word of its log lines. */
  readonly name: string;
  readonly subject: string;
  /** Queue group of the subscription: one member of the group answers each request. Default none (every instance). */
  readonly queue?: string;
  /** Validates the decoded body; a body that fails is refused with `invalid_input`. */
  readonly schema: S;
  /** What the request is called in a refusal's message (`invalid search request: k: …`); default `<name> request`. */
  readonly what?: string;
  /** What an empty (or nil) body stands for: `{}` for a request whose fields are all optional. Default none. */
  readonly emptyBody?: unknown;
  /** The host's reply guard (the fleet-safety rule of `checkReply`): a refused reply subject drops the request whole. */
  readonly replies: ReplyGuard;
  /** The tenant of a request's subject, whose own inbox the guard lets it answer; undefined for subjects of no tenant. */
  readonly tenantOf?: (subject: string) => string | undefined;
  /** The host's bounded refusal log: bad input and refused requests are counted there, never logged one by one. */
  readonly refusals: Pick<RefusalLog, 'refused'>;
  /** Counts each request (duration, and the error of a failed one); usually the host's `ServiceRegistration`. */
  readonly stats?: EndpointStats | undefined;
  /** Runs before the body is decoded (a tenant check, a rate limit): a throw refuses the request cheaply. */
  readonly admit?: (message: Msg) => void;
  /** Answers one valid request; what it returns (or resolves with) is the reply, {@link NO_REPLY} none. A throw becomes an error reply. */
  readonly handle: (request: z.infer<S>, message: Msg) => unknown;
  /** The reply of a failed request; default `{ error }`. `request` is there when the body was valid. */
  readonly errorReply?: (error: ErrorData, request: z.infer<S> | undefined) => unknown;
  /** The log line of an internal failure (a bug or a broken dependency, never bad input); default `<name> request failed`. */
  readonly failureMessage?: string;
  /**
   * The name of the server span a request that carries a `traceparent` gets, with tracing on (`search_memory`);
   * default none: the endpoint makes no spans.
   */
  readonly spanName?: string;
}

/**
 * Serves one request/reply endpoint, the one pipeline every host shares: subscribe (in a queue group when given),
 * check the reply subject ({@link ReplyGuard}: refused requests are dropped whole), decode by `Content-Type`,
 * validate, handle, answer in msgpack, and count the request for `$SRV.STATS`. A failure is answered as typed data
 * (`{ error: { code, message, retryable } }` unless `errorReply` shapes it); bad input goes to the bounded refusal
 * log, internal failures to the logger at error. A request without a reply subject is still handled, not answered.
 * Returns the subscription: drain or unsubscribe it to stop.
 *
 * @example
 * const subscription = serveEndpoint({
 *   nc, codec, logger, replies, refusals, stats: registration,
 *   name: 'state-load', subject: stateSubjects.any('load'), queue: 'agentbus.memory',
 *   schema: stateKeySchema, tenantOf: (subject) => stateSubjects.tenantOf(subject),
 *   handle: (request, message) => state.load(tenantOf(message.subject)!, request.key),
 * });
 */
export function serveEndpoint<S extends z.ZodType>(options: ServeEndpointOptions<S>): Subscription {
  const { nc, codec, logger, name, schema, replies, refusals } = options;
  const what = options.what ?? `${name} request`;
  const failureMessage = options.failureMessage ?? `${name} request failed`;
  const respond = (message: Msg, body: unknown) => {
    if (!message.reply) return;
    try {
      message.respond(codec.encode(body), { headers: msgpackHeaders() });
    } catch (err) {
      logger.warn({ err, endpoint: name }, 'could not send a reply');
    }
  };
  const serve = async (message: Msg, started: number) => {
    let request: z.infer<S> | undefined;
    try {
      options.admit?.(message);
      const empty = options.emptyBody !== undefined && message.data.length === 0;
      const value = empty ? undefined : codec.decode(message.data, contentTypeOf(message));
      request = codec.validate(schema, value ?? options.emptyBody, what);
      const body = await options.handle(request, message);
      if (body !== NO_REPLY) respond(message, body);
      options.stats?.record(name, { durationMs: performance.now() - started });
      if (options.spanName) traceEndpointServed(message.headers, options.spanName, name, started);
    } catch (err) {
      const data = toErrorData(err);
      if (data.code === ErrorCode.internal) logger.error({ err, subject: message.subject, endpoint: name }, failureMessage);
      else refusals.refused({ ...data, subject: message.subject, endpoint: name });
      respond(message, options.errorReply ? options.errorReply(data, request) : { error: data });
      options.stats?.record(name, { durationMs: performance.now() - started, error: `${data.code}: ${data.message}` });
      if (options.spanName) traceEndpointServed(message.headers, options.spanName, name, started, data);
    }
  };
  return nc.subscribe(options.subject, {
    ...(options.queue === undefined ? {} : { queue: options.queue }),
    callback: (error, message) => {
      if (error) {
        logger.warn({ err: error, subject: options.subject, endpoint: name }, 'endpoint subscription failed');
        return;
      }
      if (!replies.admits(message, options.tenantOf?.(message.subject))) return;
      void serve(message, performance.now());
    },
  });
}

/** Options of {@link serveCancelEndpoint}: those of {@link serveEndpoint} less what every cancel endpoint shares. */
export type ServeCancelOptions = Omit<ServeEndpointOptions<typeof cancelRequestSchema>, 'schema' | 'what' | 'handle' | 'errorReply' | 'queue'> & {
  /** Cancels the call when this instance runs it: its ack, or {@link NO_REPLY} when another instance runs it. */
  readonly cancel: (request: CancelRequest) => CancelAck | typeof NO_REPLY;
};

/**
 * Serves a cancel subject (`{ v, id }` → {@link CancelAck}) the way providers and tool workers do: without a queue
 * group, so the instance running the call hears it; that instance acks, the others stay silent, and every instance
 * refuses a bad request alike (`cancelled: false` with the error), the caller taking the first answer.
 */
export function serveCancelEndpoint(options: ServeCancelOptions): Subscription {
  const { cancel, ...rest } = options;
  return serveEndpoint({
    ...rest,
    schema: cancelRequestSchema,
    what: 'cancel request',
    handle: (request) => cancel(request),
    errorReply: (error): CancelAck => ({ v: 1, id: '', cancelled: false, error }),
  });
}
