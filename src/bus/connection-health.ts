import type { NatsConnection } from '@nats-io/nats-core';
import type { Logger } from '../logging.ts';

/** What a service knows of its connection. */
export interface ConnectionFigures {
  readonly state: 'connected' | 'reconnecting' | 'closed';
  /** False while disconnected, or while the probe fails: the service cannot serve. */
  readonly ready: boolean;
  readonly disconnects: number;
  readonly reconnects: number;
  /** Client-side slow-consumer events: a subscription fell behind what the server sent it. */
  readonly slowConsumers: number;
  readonly staleConnections: number;
  /** Probes in a row that got no answer. */
  readonly failedProbes: number;
}

/** Watches a connection and the service's own subscriptions through it. */
export interface ConnectionHealth {
  figures(): ConnectionFigures;
  stop(): void;
}

/** Options of {@link watchConnectionHealth}. */
export interface ConnectionHealthOptions {
  readonly nc: NatsConnection;
  readonly logger: Logger;
  /**
   * A request that goes through the server and comes back through one of this service's own subscriptions
   * (its `$SRV.PING`, say): it fails when the server no longer delivers to them.
   */
  readonly probe: (signal: AbortSignal) => Promise<void>;
  /** Time between probes; default 5 s. */
  readonly intervalMs?: number;
  /** How long a probe may take; default 2 s. */
  readonly timeoutMs?: number;
  /** Failed probes in a row before a reconnect is forced; default 2. */
  readonly reconnectAfter?: number;
  /** Failed probes in a row before the service is given up; default 6. */
  readonly giveUpAfter?: number;
  /** Called once when the connection cannot be made to serve again: exit, so a supervisor starts anew. */
  readonly onUnrecoverable: (reason: string) => void;
}

/**
 * Notices a service that stays alive but deaf: it counts the connection's status events (disconnects, slow
 * consumer, stale connection) and probes its own subscriptions through the server. A probe that fails while the
 * connection claims to be up forces a reconnect (which subscribes anew); when that does not help either,
 * `onUnrecoverable` is called. Every change is logged once, not per event of a storm.
 *
 * @example
 * const health = watchConnectionHealth({ nc, logger, probe: (signal) => pingSelf(signal), onUnrecoverable: () => process.exit(1) });
 */
export function watchConnectionHealth(options: ConnectionHealthOptions): ConnectionHealth {
  const { nc, logger } = options;
  const intervalMs = options.intervalMs ?? 5_000;
  const timeoutMs = options.timeoutMs ?? 2_000;
  const reconnectAfter = options.reconnectAfter ?? 2;
  const giveUpAfter = options.giveUpAfter ?? 6;
  let state: ConnectionFigures['state'] = nc.isClosed() ? 'closed' : 'connected';
  let disconnects = 0;
  let reconnects = 0;
  let slowConsumers = 0;
  let staleConnections = 0;
  let failedProbes = 0;
  let stopped = false;
  let gaveUp = false;
  const stopping = new AbortController();

  void (async () => {
    for await (const status of nc.status()) {
      if (stopped) return;
      switch (status.type) {
        case 'disconnect':
          disconnects += 1;
          state = 'reconnecting';
          break;
        case 'reconnect':
          reconnects += 1;
          state = 'connected';
          break;
        case 'slowConsumer':
          // Once per storm: a count is kept, the first is logged.
          if (slowConsumers++ === 0) logger.error({ pending: status.pending, subject: status.sub.getSubject() }, 'a subscription fell behind (slow consumer); messages are being dropped');
          break;
        case 'staleConnection':
          staleConnections += 1;
          logger.warn('the server stopped answering pings (stale connection); reconnecting');
          break;
        case 'close':
          state = 'closed';
          return;
        default:
          break;
      }
    }
  })().catch((err: unknown) => logger.warn({ err }, 'connection status watcher stopped'));

  const giveUp = (reason: string) => {
    if (gaveUp) return;
    gaveUp = true;
    logger.error({ failedProbes, disconnects, reconnects, slowConsumers }, `connection cannot serve: ${reason}`);
    options.onUnrecoverable(reason);
  };

  const probeOnce = async () => {
    if (stopped || state !== 'connected' || nc.isClosed() || nc.isDraining()) return;
    const signal = AbortSignal.any([stopping.signal, AbortSignal.timeout(timeoutMs)]);
    try {
      await options.probe(signal);
      if (failedProbes > 0) logger.info({ failedProbes }, 'own subscriptions answer again');
      failedProbes = 0;
    } catch (err) {
      if (stopped || state !== 'connected') return;
      failedProbes += 1;
      if (failedProbes === 1) logger.warn({ err }, 'own subscriptions did not answer a probe');
      if (failedProbes === reconnectAfter) {
        logger.error({ failedProbes }, 'own subscriptions do not answer; forcing a reconnect to subscribe anew');
        await nc.reconnect().catch((cause: unknown) => logger.warn({ err: cause }, 'forced reconnect failed'));
      }
      if (failedProbes >= giveUpAfter) giveUp(`${failedProbes} probes in a row got no answer, a reconnect did not help`);
    }
  };
  let probing = false;
  const timer = setInterval(() => {
    if (probing) return;
    probing = true;
    void probeOnce().finally(() => {
      probing = false;
    });
  }, intervalMs);
  timer.unref();

  return {
    figures: () => ({ state, ready: state === 'connected' && failedProbes === 0 && !gaveUp, disconnects, reconnects, slowConsumers, staleConnections, failedProbes }),
    stop() {
      stopped = true;
      stopping.abort();
      clearInterval(timer);
    },
  };
}
