import { nuid } from '@nats-io/nats-core';
import type { NatsConnection } from '@nats-io/nats-core';
import { createEventLoopDelayMonitor } from '../event-loop-delay.ts';
import type { EventLoopDelayFigures } from '../event-loop-delay.ts';
import type { Logger } from '../logging.ts';
import { watchConnectionHealth } from './connection-health.ts';
import type { ConnectionFigures } from './connection-health.ts';
import { inboxPrefixOf } from './inbox.ts';
import { ServiceVerb, serviceSubject } from './service-info.ts';

/** What a service says of its health in the `data` of its `$SRV.STATS` answer. */
export interface ServiceHealthFigures {
  readonly ready: boolean;
  readonly eventLoopDelay: EventLoopDelayFigures;
  readonly connection: ConnectionFigures;
}

/** A service's health: its event-loop delay, and a watch of its connection and its own subscriptions. */
export interface ServiceHealth {
  figures(): ServiceHealthFigures;
  stop(): void;
}

/** Options of {@link startServiceHealth}. */
export interface ServiceHealthOptions {
  readonly nc: NatsConnection;
  readonly logger: Logger;
  /** The service's `$SRV` name and instance id: it pings itself there, through the server. */
  readonly serviceName: string;
  readonly instanceId: string;
  /**
   * Where the probe's answers come back: `<inboxPrefix>.<id>`. Default: the prefix the connection was made with
   * (`_INBOX_tools` for the tools service), which is the one its user may subscribe to.
   */
  readonly inboxPrefix?: string;
  /** The service cannot serve and a reconnect did not help: exit, so that a supervisor starts it anew. */
  readonly onUnrecoverable: (reason: string) => void;
  /** Probe interval; default 5 s. */
  readonly probeIntervalMs?: number;
}

/**
 * Measures a service's event-loop delay and probes its own `$SRV` subscription through the server, so that a
 * service cut off as a slow consumer notices, subscribes anew, or gives up (see `watchConnectionHealth`).
 * Pass `figures` as the `statsData` of the service's registration, so that `$SRV.STATS` reports them.
 *
 * @example
 * let health: ServiceHealth | undefined;
 * const service = await startToolsService({ nc, logger, statsData: () => ({ ...health?.figures() }) });
 * health = startServiceHealth({ nc, logger, serviceName: 'agentbus-tools', instanceId: service.id!, onUnrecoverable: () => process.exit(1) });
 */
export function startServiceHealth(options: ServiceHealthOptions): ServiceHealth {
  const { nc } = options;
  const delay = createEventLoopDelayMonitor();
  const probeSubject = serviceSubject(ServiceVerb.ping, options.serviceName, options.instanceId);
  const replySubject = `${options.inboxPrefix ?? inboxPrefixOf(nc)}.${nuid.next()}`;
  // One probe runs at a time (the connection watch waits for each), so one waiter is enough.
  let answered: (() => void) | undefined;
  const replies = nc.subscribe(replySubject, { callback: () => answered?.() });
  const connection = watchConnectionHealth({
    nc,
    logger: options.logger,
    ...(options.probeIntervalMs === undefined ? {} : { intervalMs: options.probeIntervalMs }),
    probe: (signal) =>
      new Promise<void>((resolve, reject) => {
        const onAbort = () => {
          answered = undefined;
          reject(signal.reason);
        };
        if (signal.aborted) return onAbort();
        signal.addEventListener('abort', onAbort, { once: true });
        answered = () => {
          answered = undefined;
          signal.removeEventListener('abort', onAbort);
          resolve();
        };
        nc.publish(probeSubject, undefined, { reply: replySubject });
      }),
    onUnrecoverable: options.onUnrecoverable,
  });
  return {
    figures() {
      const connectionFigures = connection.figures();
      return { ready: connectionFigures.ready, eventLoopDelay: delay.figures(), connection: connectionFigures };
    },
    stop() {
      connection.stop();
      delay.stop();
      if (!nc.isClosed()) replies.unsubscribe();
    },
  };
}
