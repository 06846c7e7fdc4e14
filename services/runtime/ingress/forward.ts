import { headers as natsHeaders } from '@nats-io/nats-core';
import type { Msg, MsgHdrs } from '@nats-io/nats-core';

/** The queue group every runtime node joins on the session verbs: each message reaches one node of the fleet. */
export const INGRESS_QUEUE_GROUP = 'agentbus-runtime';

/** Headers a forwarded session message carries, besides the original ones. */
export const ForwardHeader = {
  /** The subject the client published on (`<prefix>.<tenant>.sessions.<sessionId>.<verb>`). */
  subject: 'Agentbus-Subject',
  /** How many nodes passed the message on so far (1 for the first forward). */
  hops: 'Agentbus-Hops',
  /**
   * The client's reply subject. Not the forward's own reply subject: the server refuses a client's publish whose
   * reply is a `_R_.` subject (a tenant's request through a service import), as one that could steal responses.
   */
  reply: 'Agentbus-Reply',
} as const;

/** What the runtime reads of a session message: a message heard on the bus, or one passed on by another node. */
export type SessionMessage = Pick<Msg, 'subject' | 'data' | 'headers' | 'reply' | 'respond'>;

/**
 * A message is passed on at most this many times: the first node's view of the holder can be stale (the holder
 * passivated the session, another node took it), so the holder may pass it on once more; past that it is kept.
 */
export const MAX_FORWARD_HOPS = 2;

/** The subject on which a runtime node hears the session messages other nodes pass on to it. */
export function forwardSubject(prefix: string, nodeId: string): string {
  return `${prefix}.runtime.${nodeId}.forward`;
}

/** Where a session message came from: the client's subject and how many forwards it took. */
export interface MessageOrigin {
  readonly subject: string;
  readonly hops: number;
}

/** The origin of a message heard on the queue group (the client's own subject, no forward). */
export function directOrigin(message: SessionMessage): MessageOrigin {
  return { subject: message.subject, hops: 0 };
}

/**
 * The origin of a message heard on a node's forward subject, or undefined when its headers do not say (a
 * message no runtime node sent: dropped).
 */
export function forwardedOrigin(message: Msg): MessageOrigin | undefined {
  const subject = message.headers?.get(ForwardHeader.subject);
  const hops = Number(message.headers?.get(ForwardHeader.hops));
  if (!subject || !Number.isInteger(hops) || hops < 1 || hops > MAX_FORWARD_HOPS) return undefined;
  return { subject, hops };
}

const OWN_HEADERS: ReadonlySet<string> = new Set(Object.values(ForwardHeader));

/**
 * The headers of a forward: the original ones (its content type), plus where it was published, the hop count and
 * the client's reply subject.
 */
export function forwardHeaders(message: SessionMessage, origin: MessageOrigin): MsgHdrs {
  const out = natsHeaders();
  if (message.headers) for (const [key, values] of message.headers) for (const value of values) if (!OWN_HEADERS.has(key)) out.append(key, value);
  out.set(ForwardHeader.subject, origin.subject);
  out.set(ForwardHeader.hops, String(origin.hops + 1));
  if (message.reply) out.set(ForwardHeader.reply, message.reply);
  return out;
}

/**
 * A message passed on by another node, as the message the client sent: its reply subject is the client's (from
 * the header), and answering it publishes there.
 */
export function asClientMessage(message: Msg, publish: (subject: string, data: Uint8Array | undefined, options?: { headers?: MsgHdrs }) => void): SessionMessage {
  const reply = message.headers?.get(ForwardHeader.reply) || undefined;
  return {
    subject: message.subject,
    data: message.data,
    headers: message.headers,
    reply: reply ?? '',
    respond: (data, options) => {
      if (!reply) return false;
      publish(reply, data as Uint8Array | undefined, options?.headers ? { headers: options.headers } : {});
      return true;
    },
  };
}
