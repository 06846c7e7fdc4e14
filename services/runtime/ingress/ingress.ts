import type { NatsConnection, Subscription } from '@nats-io/nats-core';
import type { ReplyGuard } from '../../../src/bus/reply-guard.ts';
import type { Logger } from '../../../src/logging.ts';
import { SessionVerb } from '../../../src/protocol/index.ts';
import type { Subjects } from '../../../src/protocol/index.ts';
import { INGRESS_QUEUE_GROUP, asClientMessage, directOrigin, forwardHeaders, forwardSubject, forwardedOrigin } from './forward.ts';
import type { MessageOrigin, SessionMessage } from './forward.ts';
import type { SessionMessageHandler } from './session-messages.ts';
import { IngressMode } from '../config.ts';

/** How many session messages a node heard, and how many it passed on: the figures of partitioned ingress. */
export interface IngressCounts {
  /** Session messages heard from the queue group (each published message reaches one node). */
  readonly heard: number;
  /** Messages other nodes passed on to this one, as the session's holder. */
  readonly forwardedIn: number;
  /** Messages this node passed on to a session's holder. */
  readonly forwardedOut: number;
  /** Lease claims that asked the bucket (a KV write or read). */
  readonly claimsAsked?: number;
  /** Lease claims of a session nobody was known to hold, answered by rendezvous hashing without the bucket. */
  readonly claimsPresumed?: number;
}

/** The session messages one node takes: its share of the queue group, and what other nodes pass on to it. */
export interface Ingress {
  counts(): IngressCounts;
  /**
   * Stops taking messages: the subscriptions are drained (what the server sent already is handled) and the
   * handling of every message taken so far is awaited, for at most `timeoutMs`.
   */
  drain(timeoutMs: number): Promise<void>;
}

/** A way to pass a message on to the node holding its session. */
export interface Forwarder {
  forward(owner: string, message: SessionMessage, origin: MessageOrigin): void;
  count(): number;
}

/**
 * Passes session messages on to their holder on its forward subject (`<prefix>.runtime.<node>.forward`), payload
 * and headers untouched, with the original subject and reply subject in headers (the holder answers the client
 * directly; a tenant's `_R_` reply of a service import is answered from the same account).
 */
export function createForwarder(nc: NatsConnection, prefix: string): Forwarder {
  let forwarded = 0;
  return {
    forward(owner, message, origin) {
      forwarded += 1;
      nc.publish(forwardSubject(prefix, owner), message.data, { headers: forwardHeaders(message, origin) });
    },
    count: () => forwarded,
  };
}

/** What {@link startIngress} subscribes with. */
export interface IngressOptions {
  readonly nc: NatsConnection;
  readonly subjects: Subjects;
  readonly prefix: string;
  readonly nodeId: string;
  readonly replies: ReplyGuard;
  readonly handler: SessionMessageHandler;
  readonly forwarder: Forwarder;
  readonly logger: Logger;
  /** `queue` (one node of the group hears each message) or `broadcast` (every node hears every message). */
  readonly mode: IngressMode;
}

const VERBS: ReadonlySet<string> = new Set(Object.values(SessionVerb));

/**
 * The runtime's ingress. `queue` (partitioned): every node joins the queue group `agentbus-runtime` on each
 * session verb, so each message published reaches one node. That node acts on it when it holds the session (or
 * claims it, when nobody does), and otherwise passes it on to the holder's forward subject, which only the
 * holder subscribes to: a message is handled by its session's holder and by at most one other node on its way
 * there. `broadcast`: every node subscribes without a queue group, every node hears every message, and only the
 * holder acts (the others keep it for failover). The forward subject is subscribed in both modes, so a fleet
 * being moved from one mode to the other node by node loses nothing.
 */
export async function startIngress(options: IngressOptions): Promise<Ingress> {
  const { nc, subjects, replies, handler, logger } = options;
  let heard = 0;
  let forwardedIn = 0;
  // Messages being handled now, and the drain waiting for them to be done (one counter, not a promise per message).
  let handling = 0;
  let idle: (() => void) | undefined;
  const settle = () => {
    handling -= 1;
    if (handling === 0) idle?.();
  };

  const take = (verb: SessionVerb, message: SessionMessage, origin: MessageOrigin) => {
    // A reply subject the requester may not own is a deputy request: dropped whole, before any lease or log.
    if (!replies.admits(message, subjects.parseSession(origin.subject)?.tenant)) return;
    handling += 1;
    handler.handle(verb, message, origin).then(settle, (err: unknown) => {
      logger.error({ err }, 'message handling failed');
      settle();
    });
  };

  const subscriptions: Subscription[] = Object.values(SessionVerb).map((verb) =>
    nc.subscribe(subjects.anySession(verb), {
      ...(options.mode === IngressMode.queue ? { queue: INGRESS_QUEUE_GROUP } : {}),
      callback: (error, message) => {
        if (error) {
          logger.warn({ err: error, verb }, 'subscription error');
          return;
        }
        heard += 1;
        take(verb, message, directOrigin(message));
      },
    }),
  );
  subscriptions.push(
    nc.subscribe(forwardSubject(options.prefix, options.nodeId), {
      callback: (error, message) => {
        if (error) {
          logger.warn({ err: error }, 'forward subscription error');
          return;
        }
        const origin = forwardedOrigin(message);
        const verb = origin ? subjects.parseSession(origin.subject)?.rest : undefined;
        if (!origin || verb === undefined || !VERBS.has(verb)) {
          logger.warn({ subject: message.subject }, 'forwarded message without its origin dropped');
          return;
        }
        forwardedIn += 1;
        take(verb as SessionVerb, asClientMessage(message, (subject, data, publishOptions) => nc.publish(subject, data, publishOptions)), origin);
      },
    }),
  );
  await nc.flush();

  return {
    counts: () => ({ heard, forwardedIn, forwardedOut: options.forwarder.count() }),
    async drain(timeoutMs) {
      let timer: ReturnType<typeof setTimeout> | undefined;
      const bound = new Promise<void>((resolve) => {
        timer = setTimeout(resolve, timeoutMs);
      });
      try {
        const drained = Promise.all(subscriptions.map((subscription) => subscription.drain().catch(() => undefined)))
          .then(() => (handling === 0 ? undefined : new Promise<void>((resolve) => (idle = resolve))));
        await Promise.race([drained, bound]);
      } finally {
        clearTimeout(timer);
      }
    },
  };
}
