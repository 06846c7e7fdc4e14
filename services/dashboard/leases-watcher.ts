import { Kvm } from '@nats-io/kv';
import type { KV } from '@nats-io/kv';
import type { NatsConnection } from '@nats-io/nats-core';
import type { Logger } from '../../src/logging.ts';
import type { Codec } from '../../src/protocol/index.ts';

/** A session's lease as the runtime writes it (`services/runtime/leases.ts`). */
export interface LeaseView {
  readonly tenant: string;
  readonly sessionId: string;
  /** The node that holds it; empty once released. */
  readonly node: string;
  readonly expiresAt: number;
  /** A turn runs or waits. */
  readonly active: boolean;
}

/** A runtime node and the sessions it holds now. */
export interface RuntimeNodeView {
  readonly node: string;
  /** Leases held and not expired. */
  readonly sessions: number;
  /** Of those, sessions with a turn running or queued. */
  readonly active: number;
}

/** A running watch of the leases bucket. */
export interface LeasesWatcher {
  lease(tenant: string, sessionId: string): LeaseView | undefined;
  nodes(): RuntimeNodeView[];
  /** Grows on every change. */
  readonly version: number;
  stop(): void;
}

/**
 * Watches the `AGENTBUS_LEASES` bucket (read only). The bucket is made by the runtime: until it exists the
 * watcher tries again every `retryMs`. `onChange` hears every lease written.
 */
export function createLeasesWatcher(deps: {
  nc: NatsConnection;
  bucket: string;
  codec: Codec;
  logger: Logger;
  now?: () => number;
  retryMs?: number;
  onChange?: (lease: LeaseView) => void;
}): LeasesWatcher {
  const now = deps.now ?? Date.now;
  const leases = new Map<string, LeaseView>();
  let version = 0;
  let stopped = false;
  let timer: ReturnType<typeof setTimeout> | undefined;
  let watch: { stop(): void } | undefined;

  const decode = (key: string, bytes: Uint8Array): LeaseView | undefined => {
    const dot = key.indexOf('.');
    if (dot < 0) return undefined;
    try {
      const value = deps.codec.decode(bytes) as { node?: unknown; expiresAt?: unknown; active?: unknown } | undefined;
      if (!value || typeof value.node !== 'string' || typeof value.expiresAt !== 'number') return undefined;
      return { tenant: key.slice(0, dot), sessionId: key.slice(dot + 1), node: value.node, expiresAt: value.expiresAt, active: value.active === true };
    } catch (err) {
      deps.logger.debug({ err, key }, 'unreadable lease');
      return undefined;
    }
  };

  const start = async () => {
    if (stopped) return;
    let kv: KV;
    try {
      kv = await new Kvm(deps.nc).open(deps.bucket);
      await kv.status();
    } catch (err) {
      deps.logger.debug({ err, bucket: deps.bucket }, 'leases bucket not there yet');
      timer = setTimeout(() => void start(), deps.retryMs ?? 2000);
      return;
    }
    const iterator = await kv.watch();
    watch = iterator;
    if (stopped) iterator.stop();
    void (async () => {
      for await (const entry of iterator) {
        if (entry.operation !== 'PUT') {
          leases.delete(entry.key);
        } else {
          const lease = decode(entry.key, entry.value);
          if (!lease) continue;
          // Released leases stay in the bucket; only held ones matter here, so memory follows the sessions hosted.
          if (lease.node === '') leases.delete(entry.key);
          else leases.set(entry.key, lease);
          deps.onChange?.(lease);
        }
        version += 1;
      }
    })().catch((err: unknown) => deps.logger.warn({ err }, 'leases watch stopped'));
  };
  void start();

  return {
    lease: (tenant, sessionId) => leases.get(`${tenant}.${sessionId}`),
    nodes() {
      const byNode = new Map<string, { sessions: number; active: number }>();
      const at = now();
      for (const lease of leases.values()) {
        if (lease.node === '' || lease.expiresAt <= at) continue;
        const entry = byNode.get(lease.node) ?? { sessions: 0, active: 0 };
        entry.sessions += 1;
        if (lease.active) entry.active += 1;
        byNode.set(lease.node, entry);
      }
      return [...byNode.entries()].map(([node, counts]) => ({ node, ...counts })).sort((a, b) => a.node.localeCompare(b.node));
    },
    get version() {
      return version;
    },
    stop() {
      stopped = true;
      clearTimeout(timer);
      watch?.stop();
    },
  };
}
