import type { Msg, NatsConnection, Subscription } from '@nats-io/nats-core';
import { createConnectionInbox } from './inbox.ts';

/** One reply subject handed out by a {@link ReplyMux}. */
export interface ReplyRoute {
  /** The subject to send as a request's reply-to. */
  readonly subject: string;
  /** Stops routing: later messages on the subject are dropped. */
  close(): void;
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

/**
 * Creates a mux on a connection (a client makes one and keeps it). Its subscription (`<inbox prefix>.<nuid>.*`, under the
 * prefix the connection was made with: `_INBOX_tools.<nuid>.*` for the tools service) is made on first use and lives
 * as long as the connection; nats.js makes it again after a reconnect. Messages for a closed or unknown
 * route are dropped (a late reply after a timeout or an abort).
 *
 * @example
 * const replies = createReplyMux(nc);
 * const route = replies.route((message) => console.log(message.data));
 * nc.publish('some.service', payload, { reply: route.subject });
 */
export function createReplyMux(nc: NatsConnection): ReplyMux {
  const handlers = new Map<string, (message: Msg) => void>();
  let prefix = '';
  let subscription: Subscription | undefined;
  let next = 0;

  function subscribe(): void {
    prefix = `${createConnectionInbox(nc)}.`;
    subscription = nc.subscribe(`${prefix}*`, {
      callback: (error, message) => {
        if (error) return;
        handlers.get(message.subject.slice(prefix.length))?.(message);
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
      handlers.set(token, handler);
      return {
        subject: prefix + token,
        close: () => void handlers.delete(token),
      };
    },
  };
}
