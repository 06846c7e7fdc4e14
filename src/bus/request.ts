import {
  NoRespondersError as NatsNoRespondersError,
  RequestError as NatsRequestError,
  TimeoutError as NatsTimeoutError,
} from '@nats-io/nats-core';
import type { Msg, MsgHdrs, NatsConnection } from '@nats-io/nats-core';
import { NoRespondersError, TimeoutError, abortReason } from '../errors.ts';
import { ContentType } from '../protocol/index.ts';
import { EncodedOnceHeaders } from './encoded-headers.ts';
import type { ReplyMux } from './reply-mux.ts';

/**
 * msgpack headers for a payload, plus any extra ones. Encoded once for as many messages as they are sent with
 * (see {@link EncodedOnceHeaders}): a publisher that keeps one sends them at no cost per message.
 */
export function msgpackHeaders(extra?: MsgHdrs): MsgHdrs {
  const result = new EncodedOnceHeaders();
  result.set('Content-Type', ContentType.msgpack);
  if (extra) for (const [key, values] of extra) for (const value of values) result.append(key, value);
  return result;
}

/**
 * True when a message is the server's 503 "no responders" status. That status has no body: a message with one is
 * answered without decoding its headers.
 */
export function isNoResponders(message: Msg): boolean {
  if (message.data.byteLength > 0) return false;
  return message.headers?.hasError === true && message.headers.code === 503;
}

/** Options of {@link request}: the wait, the headers (msgpack by default), and the mux the reply comes back through. */
export interface RequestOptions {
  readonly timeoutMs: number;
  readonly signal?: AbortSignal;
  readonly headers?: MsgHdrs;
  /** Reply subjects: one shared subscription instead of one (or a nats.js request) per call. */
  readonly replies: ReplyMux;
}

/**
 * One request, one reply, with a timeout and an AbortSignal; the reply comes back on a route of
 * `options.replies`. A reply that came while the event loop was held past the timeout is still read (one turn of
 * the loop after the timer); a late reply after a timeout or an abort is dropped. Rejects with
 * {@link NoRespondersError}, {@link TimeoutError} or the signal's reason.
 */
export function request(nc: NatsConnection, subject: string, payload: Uint8Array, options: RequestOptions): Promise<Msg> {
  return new Promise<Msg>((resolve, reject) => {
    const { signal } = options;
    if (signal?.aborted) {
      reject(abortReason(signal));
      return;
    }
    let finished = false;
    const finish = () => {
      finished = true;
      route.close();
      clearTimeout(timer);
      signal?.removeEventListener('abort', onAbort);
    };
    const onAbort = () => {
      finish();
      reject(abortReason(signal!));
    };
    const route = options.replies.route((message) => {
      finish();
      if (isNoResponders(message)) reject(new NoRespondersError(subject));
      else resolve(message);
    });
    // Timers run before I/O in a turn of the event loop: when this one fires late (the loop was held: a loaded
    // process), a reply that came meanwhile sits unread in the socket. One more turn reads it before the wait is over.
    // A reply already read may wait in the mux's paced queue, handed out only after timers: it is taken first.
    const timer = setTimeout(() => {
      route.deliverWaiting();
      if (finished) return;
      setImmediate(() => {
        if (finished) return;
        route.deliverWaiting();
        if (finished) return;
        finish();
        reject(new TimeoutError(`no reply on ${subject} within ${options.timeoutMs} ms`, options.timeoutMs, subject));
      });
    }, options.timeoutMs);
    signal?.addEventListener('abort', onAbort, { once: true });
    try {
      nc.publish(subject, payload, { reply: route.subject, headers: options.headers ?? msgpackHeaders() });
    } catch (error) {
      finish();
      reject(error);
    }
  });
}

/**
 * Maps nats.js request errors to ours: a `RequestError` caused by no responders (`request`) or a bare
 * `NoRespondersError` (`requestMany`) becomes {@link NoRespondersError}, nats.js's `TimeoutError` becomes
 * {@link TimeoutError}; anything else is returned as it is.
 */
export function translateRequestError(error: unknown, subject: string, timeoutMs: number): unknown {
  if (error instanceof NatsNoRespondersError || (error instanceof NatsRequestError && error.isNoResponders())) {
    return new NoRespondersError(subject);
  }
  if (error instanceof NatsTimeoutError) {
    return new TimeoutError(`no reply on ${subject} within ${timeoutMs} ms`, timeoutMs, subject);
  }
  return error;
}

/** A promise that rejects with the signal's reason; `cleanup` removes the listener. */
export function abortPromise(signal?: AbortSignal): { promise: Promise<never>; cleanup: () => void } {
  if (!signal) return { promise: new Promise<never>(() => {}), cleanup: () => {} };
  let onAbort: () => void = () => {};
  const promise = new Promise<never>((_, reject) => {
    onAbort = () => reject(abortReason(signal));
    if (signal.aborted) onAbort();
    else signal.addEventListener('abort', onAbort, { once: true });
  });
  // Avoid an unhandled rejection when nobody raced against it.
  promise.catch(() => {});
  return { promise, cleanup: () => signal.removeEventListener('abort', onAbort) };
}
