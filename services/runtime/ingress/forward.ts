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
} as const;

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
export function directOrigin(message: Msg): MessageOrigin {
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

/** The headers of a forward: the original ones (its content type), plus where it was published and the hop count. */
export function forwardHeaders(original: MsgHdrs | undefined, origin: MessageOrigin): MsgHdrs {
  const out = natsHeaders();
  if (original) for (const [key, values] of original) for (const value of values) if (key !== ForwardHeader.subject && key !== ForwardHeader.hops) out.append(key, value);
  out.set(ForwardHeader.subject, origin.subject);
  out.set(ForwardHeader.hops, String(origin.hops + 1));
  return out;
}
