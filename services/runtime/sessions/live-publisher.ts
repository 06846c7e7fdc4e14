import type { NatsConnection } from '@nats-io/nats-core';
import type { Codec, EnvelopeFactory, EventDataMap, LiveEventType, Subjects } from '../../../src/protocol/index.ts';
import { msgpackHeaders } from '../../../src/bus/request.ts';

/** Publishes a session's ephemeral events on `live.<type>`, without waiting for acknowledgements. */
export interface LivePublisher {
  publish<T extends LiveEventType>(
    type: T,
    scope: { tenant: string; sessionId: string; turnId?: string; step?: number },
    data: EventDataMap[T],
  ): void;
}

/** Creates the live publisher. */
export function createLivePublisher(deps: { nc: NatsConnection; subjects: Subjects; codec: Codec; envelopes: EnvelopeFactory }): LivePublisher {
  const headers = msgpackHeaders();
  return {
    publish(type, scope, data) {
      const envelope = deps.envelopes.create(type, scope, data);
      deps.nc.publish(deps.subjects.live(scope.tenant, scope.sessionId, type), deps.codec.encode(envelope), { headers });
    },
  };
}
