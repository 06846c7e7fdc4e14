import type { NatsConnection } from '@nats-io/nats-core';
import { watchBucket } from './bucket-watch.ts';
import type { Logger } from '../../src/logging.ts';
import type { Codec } from '../../src/protocol/index.ts';

/** A session's lease as the runtime writes it (`services/runtime/node/leases.ts`). */
export interface LeaseView {
  readonly tenant: string;
  readonly sessionId: string;
  /** The node that holds it (while that node is alive); empty once released. */
  readonly node: string;
  /** A turn runs or waits. */
  readonly active: boolean;
}

/** A live runtime node and the sessions it holds now. */
export interface RuntimeNodeView {
  readonly node: string;
  readonly sessions: number;
  /** Of those, sessions with a turn running or queued. */
  readonly active: number;
}

/** A running watch of the leases and nodes buckets. */
export interface LeasesWatcher {
  lease(tenant: string, sessionId: string): LeaseView | undefined;
  /** Nodes whose heartbeat is current, with the sessions each holds. */
  nodes(): RuntimeNodeView[];
  stop(): void;
}

/**
 * Watches the `AGENTBUS_LEASES` bucket (who holds which session) and the `AGENTBUS_NODES` bucket (each runtime
 * node's heartbeat), read only. A node is shown while its heartbeat is current; a dead node's leases stay in
 * the bucket until another node takes them, and are not counted. `onChange` hears every lease written.
 */
export function createLeasesWatcher(deps: {
  nc: NatsConnection;
  bucket: string;
  nodesBucket: string;
  codec: Codec;
  logger: Logger;
  now?: () => number;
  retryMs?: number;
  onChange?: (lease: LeaseView) => void;
}): LeasesWatcher {
  const now = deps.now ?? Date.now;
  const leases = new Map<string, LeaseView>();
  /** Node id → when its last heartbeat was seen (this process's clock) and how long it is good for. */
  const heartbeats = new Map<string, { at: number; ttlMs: number }>();

  const decodeLease = (key: string, bytes: Uint8Array): LeaseView | undefined => {
    const dot = key.indexOf('.');
    if (dot < 0) return undefined;
    try {
      const value = deps.codec.decode(bytes) as { node?: unknown; active?: unknown } | undefined;
      if (!value || typeof value.node !== 'string') return undefined;
      return { tenant: key.slice(0, dot), sessionId: key.slice(dot + 1), node: value.node, active: value.active === true };
    } catch (err) {
      deps.logger.debug({ err, key }, 'unreadable lease');
      return undefined;
    }
  };

  const common = { nc: deps.nc, logger: deps.logger, retryMs: deps.retryMs ?? 2000 };
  const leaseWatch = watchBucket({
    ...common,
    bucket: deps.bucket,
    onPut: (entry) => {
      const lease = decodeLease(entry.key, entry.value);
      if (!lease) return;
      // Released leases stay in the bucket; only held ones matter here, so memory follows the sessions hosted.
      if (lease.node === '') leases.delete(entry.key);
      else leases.set(entry.key, lease);
      deps.onChange?.(lease);
    },
    onRemove: (key) => leases.delete(key),
  });
  const nodeWatch = watchBucket({
    ...common,
    bucket: deps.nodesBucket,
    onPut: (entry) => {
      let ttlMs = 2000;
      try {
        const value = deps.codec.decode(entry.value) as { ttlMs?: unknown } | undefined;
        if (typeof value?.ttlMs === 'number' && value.ttlMs > 0) ttlMs = value.ttlMs;
      } catch {
        // An unreadable heartbeat still says the node was there.
      }
      // The bucket as it was when the watch began carries the server's time of each write; later ones are now.
      heartbeats.set(entry.key, { at: entry.isUpdate ? now() : entry.created.getTime(), ttlMs });
    },
    onRemove: (key) => heartbeats.delete(key),
  });

  return {
    lease: (tenant, sessionId) => leases.get(`${tenant}.${sessionId}`),
    nodes() {
      const at = now();
      const byNode = new Map<string, { sessions: number; active: number }>();
      for (const [node, heartbeat] of heartbeats) {
        if (at - heartbeat.at <= heartbeat.ttlMs) byNode.set(node, { sessions: 0, active: 0 });
      }
      for (const lease of leases.values()) {
        const entry = byNode.get(lease.node);
        if (!entry) continue;
        entry.sessions += 1;
        if (lease.active) entry.active += 1;
      }
      return [...byNode.entries()].map(([node, counts]) => ({ node, ...counts })).sort((a, b) => a.node.localeCompare(b.node));
    },
    stop() {
      leaseWatch.stop();
      nodeWatch.stop();
    },
  };
}
