import { PermissionViolationError, RequestError, TimeoutError as NatsTimeoutError } from '@nats-io/nats-core';
import type { NatsConnection } from '@nats-io/nats-core';
import { z } from 'zod';
import { TimeoutError } from '../errors.ts';
import { ContentType } from '../protocol/index.ts';
import type { Codec } from '../protocol/index.ts';
import { abortPromise } from '../bus/request.ts';

/** How a client reads a session's events back. */
export const EventReader = {
  /** Ordered consumers on the log and live streams: resumable from any sequence, live events kept 5 minutes. */
  jetstream: 'jetstream',
  /** Plain subscriptions to the log and live subjects, the log read back through memory's `history`. */
  core: 'core',
} as const;
export type EventReader = (typeof EventReader)[keyof typeof EventReader];

/** JetStream's "not enabled for account" error code (nats-server's JSNotEnabledForAccountErr). */
const NOT_ENABLED_FOR_ACCOUNT = 10039;
const accountInfoReply = z.object({ error: z.object({ code: z.number().optional(), err_code: z.number().optional() }).optional() }).loose();

/**
 * Which way this connection reads events: one `$JS.API.INFO` request. JetStream's account info means
 * {@link EventReader.jetstream}; its answer "JetStream not enabled for account" (a tenant in an account of its own,
 * `deploy/nats/nats-server.conf`), no responders (a server without JetStream) or a refused publish mean
 * {@link EventReader.core}. Any other JetStream error is taken as JetStream being there (the consumers then report
 * it). A client asks once and keeps the answer.
 */
export async function detectEventReader(nc: NatsConnection, codec: Codec, options: { timeoutMs?: number; signal?: AbortSignal } = {}): Promise<EventReader> {
  options.signal?.throwIfAborted();
  const timeoutMs = options.timeoutMs ?? 5000;
  const aborted = abortPromise(options.signal);
  try {
    // nats.js' own request (not our reply mux): it rejects at once with the server's permission violation.
    const reply = await Promise.race([nc.request('$JS.API.INFO', new Uint8Array(0), { timeout: timeoutMs }), aborted.promise]);
    const info = codec.validate(accountInfoReply, codec.decode(reply.data, ContentType.json), 'JetStream account info');
    return info.error?.err_code === NOT_ENABLED_FOR_ACCOUNT ? EventReader.core : EventReader.jetstream;
  } catch (error) {
    const cause = error instanceof RequestError ? error.cause : error;
    if ((error instanceof RequestError && error.isNoResponders()) || cause instanceof PermissionViolationError) return EventReader.core;
    if (cause instanceof NatsTimeoutError) throw new TimeoutError(`no answer on $JS.API.INFO within ${timeoutMs} ms`, timeoutMs, '$JS.API.INFO');
    throw error;
  } finally {
    aborted.cleanup();
  }
}
