import { InvalidInputError } from '../errors.ts';
import { contentTypeOf } from './codec.ts';
import type { Codec } from './codec.ts';
import type { AgentEvent } from './events.ts';
import { liveEventSchema } from './live-schemas.ts';
import { logEventSchema } from './log-schemas.ts';
import type { Subjects } from './subjects.ts';

/** A message as NATS hands it over (a core `Msg` or a JetStream `JsMsg`). */
export interface EventMessage {
  readonly subject: string;
  readonly data: Uint8Array;
  readonly headers?: { get(key: string): string } | undefined;
}

/**
 * Decodes and validates a message received on a session's `log` or `live.<type>` subject, as a client
 * reads it: a log subject holds only log events (`logEventSchema`), a live subject only live events of
 * that subject's type (`liveEventSchema`), and the event's `tenant` and `sessionId` are those of the
 * subject. Anyone who may publish on a session's subjects can put anything there, so a message that
 * fails any of this throws an `InvalidInputError` (or `PayloadTooLargeError`) saying why; the caller
 * skips it. The event comes back without `seq`.
 *
 * @example
 * const event = decodeSessionEvent(codec, subjects, message); // message on agentbus.default.sessions.s1.live.assistant.delta
 */
export function decodeSessionEvent(codec: Codec, subjects: Subjects, message: EventMessage): AgentEvent {
  const where = subjects.parseSession(message.subject);
  const live = where?.rest.startsWith('live.') ? where.rest.slice('live.'.length) : undefined;
  if (!where || (where.rest !== 'log' && live === undefined)) {
    throw new InvalidInputError(`${message.subject} is not a session's log or live subject`);
  }
  const value = codec.decode(message.data, contentTypeOf(message));
  const event: AgentEvent = live === undefined ? codec.validate(logEventSchema, value, 'log event') : codec.validate(liveEventSchema, value, 'live event');
  if (event.tenant !== where.tenant || event.sessionId !== where.sessionId) {
    throw new InvalidInputError(`invalid ${live === undefined ? 'log' : 'live'} event: an event of ${event.tenant}/${event.sessionId} on a subject of ${where.tenant}/${where.sessionId}`);
  }
  if (live !== undefined && event.type !== live) {
    throw new InvalidInputError(`invalid live event: type ${event.type} on live.${live}`);
  }
  return event;
}
