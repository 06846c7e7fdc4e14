import type { Msg, NatsConnection } from '@nats-io/nats-core';
import { NoRespondersError, TimeoutError, abortReason } from '../errors.ts';
import { isNoResponders, msgpackHeaders } from './request.ts';
import type { RequestOptions } from './request.ts';

/** Options of a streamed request: those of a request (its `timeoutMs` bounds the whole stream), and an idle timeout. */
export interface StreamRequestOptions extends RequestOptions {
  /** Longest wait for the first and for every next message. */
  readonly idleTimeoutMs: number;
}

/**
 * Sends a request whose answer is a stream of messages on the reply subject, and yields them in order, in
 * batches (every message that arrived since the last batch, at least one), until `isLast` says a message
 * ends the stream: a consumer takes what came together in one async step, not one per message. Throws
 * {@link NoRespondersError} when no one listens, {@link TimeoutError} when the stream stalls or runs too
 * long, the signal's reason on abort.
 *
 * Ordering is kept by NATS for one publisher and one subscriber; callers check `seq` all the same.
 */
export async function* streamRequest(
  nc: NatsConnection,
  subject: string,
  payload: Uint8Array,
  isLast: (message: Msg) => boolean,
  options: StreamRequestOptions,
): AsyncGenerator<readonly Msg[], void, undefined> {
  options.signal?.throwIfAborted();
  const queue: Msg[] = [];
  let wake: (() => void) | undefined;
  const onMessage = (message: Msg) => {
    queue.push(message);
    wake?.();
  };
  const route = options.replies.route(onMessage);
  const started = Date.now();
  let timer: ReturnType<typeof setTimeout> | undefined;
  const onAbort = () => wake?.();
  options.signal?.addEventListener('abort', onAbort, { once: true });
  try {
    nc.publish(subject, payload, { reply: route.subject, headers: options.headers ?? msgpackHeaders() });
    while (true) {
      if (queue.length === 0) {
        const remaining = options.timeoutMs - (Date.now() - started);
        const wait = Math.max(0, Math.min(options.idleTimeoutMs, remaining));
        await new Promise<void>((resolve) => {
          wake = resolve;
          timer = setTimeout(resolve, wait);
        });
        clearTimeout(timer);
        wake = undefined;
      }
      if (options.signal?.aborted) throw abortReason(options.signal);
      // The timer fired: a message already read may wait in the mux's paced queue, handed out only after timers.
      if (queue.length === 0) route.deliverWaiting();
      if (queue.length === 0) {
        const total = Date.now() - started >= options.timeoutMs;
        const limit = total ? options.timeoutMs : options.idleTimeoutMs;
        throw new TimeoutError(
          total ? `stream on ${subject} ran past ${limit} ms` : `stream on ${subject} was silent for ${limit} ms`,
          limit,
          subject,
        );
      }
      const last = queue.findIndex(isLast);
      const batch = queue.splice(0, last === -1 ? queue.length : last + 1);
      if (isNoResponders(batch[0]!)) throw new NoRespondersError(subject);
      yield batch;
      if (last !== -1) return;
    }
  } finally {
    clearTimeout(timer);
    options.signal?.removeEventListener('abort', onAbort);
    route.close();
  }
}
