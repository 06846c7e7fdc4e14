import type { NatsConnection, Subscription } from '@nats-io/nats-core';
import type { Logger } from '../../src/logging.ts';
import { decodeSessionEvent } from '../../src/protocol/index.ts';
import type { AgentEvent, Codec, Subjects } from '../../src/protocol/index.ts';

/** A running watch of every session's log and live subjects. */
export interface BusWatcher {
  /** Messages skipped because they were not valid events. */
  readonly skipped: number;
  stop(): void;
}

/**
 * Follows every session of every tenant as it happens: `<prefix>.*.sessions.*.log` and
 * `<prefix>.*.sessions.*.live.>`, each message decoded and validated with `decodeSessionEvent`. A message
 * that is not a valid event is skipped and logged at debug (anyone who may publish there can put anything there).
 *
 * @example
 * const watcher = createBusWatcher({ nc, subjects, codec, logger, onEvent: (event) => fleet.apply(event) });
 */
export function createBusWatcher(deps: {
  nc: NatsConnection;
  subjects: Subjects;
  codec: Codec;
  logger: Logger;
  onEvent: (event: AgentEvent) => void;
  /**
   * Whether a message is wanted at all, asked before it is decoded: `live` is the live type (`assistant.delta`, …),
   * undefined for the log. Saying no to deltas nobody watches saves most of the decoding.
   */
  wants?: (tenant: string, sessionId: string, live: string | undefined) => boolean;
}): BusWatcher {
  let skipped = 0;
  const subscriptions: Subscription[] = [deps.subjects.anyLog(), deps.subjects.anyLive()].map((subject) =>
    deps.nc.subscribe(subject, {
      callback: (error, message) => {
        if (error) {
          deps.logger.warn({ err: error, subject }, 'session subscription failed');
          return;
        }
        if (deps.wants) {
          const where = deps.subjects.parseSession(message.subject);
          const live = where?.rest.startsWith('live.') ? where.rest.slice('live.'.length) : undefined;
          if (where && !deps.wants(where.tenant, where.sessionId, live)) return;
        }
        let event: AgentEvent;
        try {
          event = decodeSessionEvent(deps.codec, deps.subjects, message);
        } catch (err) {
          skipped += 1;
          deps.logger.debug({ err, subject: message.subject }, 'skipped a message that is not a valid event');
          return;
        }
        try {
          deps.onEvent(event);
        } catch (err) {
          deps.logger.warn({ err, type: event.type }, 'an event observer failed');
        }
      },
    }),
  );
  return {
    get skipped() {
      return skipped;
    },
    stop() {
      for (const subscription of subscriptions) subscription.unsubscribe();
    },
  };
}
