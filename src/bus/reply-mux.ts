import type { Msg, NatsConnection, Subscription } from '@nats-io/nats-core';
import { createConnectionInbox } from './inbox.ts';
import { createHeaderSharing } from './shared-headers.ts';
import { pacedDispatch } from './paced-dispatch.ts';

/** One reply subject handed out by a {@link ReplyMux}. */
export interface ReplyRoute {
  /** The subject to send as a request's reply-to. */
  readonly subject: string;
  /** Stops routing: later messages on the subject are dropped. */
  close(): void;
  /**
   * Hands the route's messages that came but wait for a later turn of the loop (the mux paces what it hands out) to
   * its handler now. A timer that is about to give up on the route calls it first: timers run before the
   * `setImmediate` that hands waiting messages out, so under a backlog an on-time reply would otherwise lose to
   * its own timeout.
   */
  deliverWaiting(): void;
}

/**
 * Reply subjects under one wildcard subscription. A request, a streamed reply or a JetStream append takes a
 * route instead of a subscription of its own (no SUB/UNSUB per call) or a nats.js request (which builds an
 * error object per reply it resolves), and the replies of all the calls a client has in flight share the
 * one subscription.
 */
export interface ReplyMux {
  /** A new reply subject whose messages go to `handler` until the route is closed. */
  route(handler: (message: Msg) => void): ReplyRoute;
}

/** Replies a mux hands out in one turn of the event loop by default; the rest wait for the next (see {@link pacedDispatch}). */
export const REPLIES_PER_TURN = 64;

/**
 * Creates a mux on a connection (a client makes one and keeps it). Its subscription (`<inbox prefix>.<nuid>.*`, under the
 * prefix the connection was made with: `_INBOX_tools.<nuid>.*` for the tools service) is made on first use and lives
 * as long as the connection; nats.js makes it again after a reconnect. Messages for a closed or unknown
 * route are dropped (a late reply after a timeout or an abort). At most `perTurn` replies (default
 * {@link REPLIES_PER_TURN}) are handed out in one turn of the event loop, the rest in the next turns, in order: a
 * backlog read at once does not hold the loop for all the work it starts.
 *
 * @example
 * const replies = createReplyMux(nc);
 * const route = replies.route((message) => console.log(message.data));
 * nc.publish('some.service', payload, { reply: route.subject });
 */
export function createReplyMux(nc: NatsConnection, options: { perTurn?: number } = {}): ReplyMux {
  const handlers = new Map<string, (message: Msg) => void>();
  let prefix = '';
  let subscription: Subscription | undefined;
  let next = 0;
  // Replies are only read: the many alike (every chunk and reply says `Content-Type: application/msgpack`) share headers.
  const shareHeaders = createHeaderSharing();
  const dispatch = pacedDispatch((message: Msg) => handlers.get(message.subject.slice(prefix.length))?.(message), { perTurn: options.perTurn ?? REPLIES_PER_TURN });

  function subscribe(): void {
    prefix = `${createConnectionInbox(nc)}.`;
    subscription = nc.subscribe(`${prefix}*`, {
      callback: (error, message) => {
        if (error) return;
        shareHeaders(message);
        dispatch(message);
      },
    });
    // A closed connection ends the subscription: the next route makes a fresh one (and fails as nats.js does).
    void subscription.closed.then(() => {
      subscription = undefined;
    });
  }

  return {
    route(handler) {
      if (!subscription || subscription.isClosed()) subscribe();
      const token = (next++).toString(36);
      const subject = prefix + token;
      handlers.set(token, handler);
      return {
        subject,
        close: () => void handlers.delete(token),
        deliverWaiting: () => {
          if (dispatch.waiting > 0 && handlers.has(token)) dispatch.handleWaiting((message) => message.subject === subject);
        },
      };
    },
  };
}
