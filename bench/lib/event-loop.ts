import type { NatsConnection } from '@nats-io/nats-core';

/** One service's event-loop delay, as its `$SRV.STATS` data reports it. */
export interface ServiceLoopDelay {
  readonly service: string;
  readonly p99Ms: number;
  readonly maxMs: number;
}

/**
 * Asks every service for `$SRV.STATS` and keeps the event-loop delay of those that report one (runtime nodes
 * do: the last 10 to 20 s, so read it right after the load to measure).
 */
export async function readLoopDelays(nc: NatsConnection, waitMs = 500): Promise<ServiceLoopDelay[]> {
  const inbox = nc.subscribe(`_INBOX.bench-loop-${Date.now()}`);
  const found: ServiceLoopDelay[] = [];
  nc.publish('$SRV.STATS', undefined, { reply: inbox.getSubject() });
  const timer = setTimeout(() => inbox.unsubscribe(), waitMs);
  for await (const message of inbox) {
    // A $SRV answer is JSON by the spec: bench-side reading of the services API, not bus data of ours.
    const stats = JSON.parse(new TextDecoder().decode(message.data)) as { name: string; data?: { eventLoopDelay?: { p99Ms: number; maxMs: number } } };
    const delay = stats.data?.eventLoopDelay;
    if (delay) found.push({ service: stats.name, p99Ms: delay.p99Ms, maxMs: delay.maxMs });
  }
  clearTimeout(timer);
  return found;
}
