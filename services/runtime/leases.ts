import { JetStreamApiError } from '@nats-io/jetstream';
import type { KV } from '@nats-io/kv';
import type { Codec } from '../../src/protocol/index.ts';
import type { Logger } from '../../src/logging.ts';

const WRONG_LAST_SEQUENCE = 10071;

/** A lease as stored in the KV bucket, one key per session (`<tenant>.<sessionId>`). */
interface LeaseValue {
  /** Owner node id; empty once released. */
  readonly node: string;
  readonly expiresAt: number;
  /** True while the session has a turn running or queued: a node that finds it expired resumes it. */
  readonly active: boolean;
}

/** A session another node should pick up. */
export interface OrphanSession {
  readonly tenant: string;
  readonly sessionId: string;
}

/**
 * Which node hosts which session. A node acts on a session only while it holds its lease; leases are
 * renewed while held and expire when a node dies, so another node can claim and resume the session.
 * Compare-and-set on the KV revision makes every claim race have one winner. Expiry compares node clocks,
 * so keep them in sync (NTP) to well within the lease TTL.
 */
export interface SessionLeases {
  /**
   * True when this node holds (or just took) the session's lease. `active: true` writes the lease active in
   * the same KV write that takes or renews it (a prompt's claim). A lease held and still fresh is not written
   * at all, so its flag is left as it is: follow with `setActive`, which writes only when the flag changes.
   */
  claim(tenant: string, sessionId: string, options?: { active?: boolean }): Promise<boolean>;
  /**
   * Records whether a held session has work, so a node that finds its lease expired resumes it. Written
   * through at once: mark a session active before logging its prompt.
   */
  setActive(tenant: string, sessionId: string, active: boolean): Promise<void>;
  /** Gives a held lease back. An active session's lease stays visible as an orphan to resume. */
  release(tenant: string, sessionId: string): Promise<void>;
  /**
   * Removes the session's lease for good (a deleted session): held or not, its key is purged, so no node
   * finds it as an orphan to resume.
   */
  forget(tenant: string, sessionId: string): Promise<void>;
  /** Sessions whose lease expired or was released with work left. */
  orphans(): Promise<OrphanSession[]>;
  /** Renews every held lease; calls `onLost` for those another node took. */
  renewAll(onLost: (tenant: string, sessionId: string) => void): Promise<void>;
}

/** Creates the lease manager of one node over a KV bucket. */
export function createSessionLeases(deps: { kv: KV; codec: Codec; nodeId: string; ttlMs: number; now: () => number; logger: Logger }): SessionLeases {
  const { kv, codec, nodeId, ttlMs, now } = deps;
  interface HeldLease {
    revision: number;
    expiresAt: number;
    active: boolean;
    /** Writes of one lease run one after another, so compare-and-set never races itself; undefined when none runs. */
    chain: Promise<void> | undefined;
  }
  const held = new Map<string, HeldLease>();
  const keyOf = (tenant: string, sessionId: string) => `${tenant}.${sessionId}`;
  const encode = (active: boolean, node = nodeId): { value: LeaseValue; bytes: Uint8Array } => {
    const value = { node, expiresAt: node === '' ? 0 : now() + ttlMs, active };
    return { value, bytes: codec.encode(value) };
  };
  const decode = (bytes: Uint8Array): LeaseValue | undefined => {
    try {
      const value = codec.decode(bytes) as Partial<LeaseValue> | undefined;
      if (value && typeof value.node === 'string' && typeof value.expiresAt === 'number') {
        return { node: value.node, expiresAt: value.expiresAt, active: value.active === true };
      }
    } catch (err) {
      deps.logger.warn({ err }, 'unreadable lease');
    }
    return undefined;
  };

  // Claims of one key in flight: a second claim waits for the first instead of racing it. Raced, the loser
  // (this same node) read the winner's fresh lease, failed its compare-and-set and deleted the winner's record,
  // and its message (a second prompt sent at once to a new session) got no reply at all.
  const claiming = new Map<string, Promise<boolean>>();

  async function claim(tenant: string, sessionId: string, options: { active?: boolean } = {}): Promise<boolean> {
    const key = keyOf(tenant, sessionId);
    const mine = held.get(key);
    // The common case, a held and fresh lease, stays synchronous.
    if (mine && mine.expiresAt - now() > ttlMs / 3 && !claiming.has(key)) return true;
    for (let inFlight = claiming.get(key); inFlight; inFlight = claiming.get(key)) await inFlight.catch(() => false);
    const attempt = claimOnce(key, options);
    claiming.set(key, attempt);
    try {
      return await attempt;
    } finally {
      if (claiming.get(key) === attempt) claiming.delete(key);
    }
  }

  async function claimOnce(key: string, options: { active?: boolean }): Promise<boolean> {
    const mine = held.get(key);
    if (mine && mine.expiresAt - now() > ttlMs / 3) return true;
    if (!mine) {
      // Most claims are of sessions nobody holds: try to create the key first, one KV write instead of a get and a write.
      const { value, bytes } = encode(options.active === true);
      try {
        const revision = await kv.create(key, bytes);
        held.set(key, { revision, expiresAt: value.expiresAt, active: value.active, chain: undefined });
        return true;
      } catch {
        // The key exists (or existed): read it and take it over if it is free.
      }
    }
    const entry = await kv.get(key);
    const current = entry && entry.operation === 'PUT' ? decode(entry.value) : undefined;
    if (current && current.node !== '' && current.node !== nodeId && current.expiresAt > now()) return false;
    const { value, bytes } = encode(options.active === true || (mine?.active ?? current?.active ?? false));
    try {
      const revision = entry?.operation === 'PUT' ? await kv.update(key, bytes, entry.revision) : await kv.create(key, bytes);
      if (mine) {
        // Renewals chained on this lease keep working on the same object.
        mine.revision = revision;
        mine.expiresAt = value.expiresAt;
        mine.active = value.active;
      } else {
        held.set(key, { revision, expiresAt: value.expiresAt, active: value.active, chain: undefined });
      }
      return true;
    } catch (err) {
      if (!isRevisionConflict(err) && !/exists/i.test((err as Error).message ?? '')) {
        // A timeout or a reconnect: a lease still held stays held; renewal sorts it out.
        deps.logger.info({ err, key }, 'lease claim not written this time');
        return mine !== undefined;
      }
      // Someone else won the race.
      held.delete(key);
      return false;
    }
  }

  /** Renews a held lease with its `active` flag: `held`, `lost` when another node took it, `gone` once released. */
  function write(key: string, lease: HeldLease): Promise<'held' | 'lost' | 'gone'> {
    const attempt = (lease.chain ?? Promise.resolve()).then(async (): Promise<'held' | 'lost' | 'gone'> => {
      if (held.get(key) !== lease) return 'gone';
      const { value, bytes } = encode(lease.active);
      try {
        lease.revision = await kv.update(key, bytes, lease.revision);
        lease.expiresAt = value.expiresAt;
        return 'held';
      } catch (err) {
        if (!isRevisionConflict(err)) {
          // A timeout or a reconnect is not a lost lease: keep it and try again at the next renewal. If it
          // expired meanwhile and another node took it, that write fails on the revision and says so.
          deps.logger.info({ err, key }, 'lease not renewed this time');
          return 'held';
        }
        // An update whose reply was lost (a reconnect) may have been applied: then the key holds our own write.
        const current = await kv.get(key).catch(() => null);
        const mine = current && current.operation === 'PUT' ? decode(current.value) : undefined;
        if (current && mine?.node === nodeId) {
          lease.revision = current.revision;
          return 'held';
        }
        deps.logger.warn({ err, key }, 'lease lost');
        held.delete(key);
        return 'lost';
      }
    });
    const chain: Promise<void> = attempt.then(() => {
      if (lease.chain === chain) lease.chain = undefined;
    });
    lease.chain = chain;
    return attempt;
  }

  return {
    claim,
    async setActive(tenant, sessionId, active) {
      const key = keyOf(tenant, sessionId);
      const lease = held.get(key);
      if (!lease || lease.active === active) return;
      lease.active = active;
      await write(key, lease);
    },
    async release(tenant, sessionId) {
      const key = keyOf(tenant, sessionId);
      const lease = held.get(key);
      if (!lease) return;
      await lease.chain;
      held.delete(key);
      try {
        if (lease.active) await kv.update(key, encode(true, '').bytes, lease.revision);
        else await kv.delete(key, { previousSeq: lease.revision });
      } catch (err) {
        deps.logger.warn({ err, key }, 'lease not released; it will expire');
      }
    },
    async forget(tenant, sessionId) {
      const key = keyOf(tenant, sessionId);
      const lease = held.get(key);
      if (lease) {
        // A renewal in flight would write the key again after the purge.
        await lease.chain;
        held.delete(key);
      }
      await kv.purge(key);
    },
    async orphans() {
      const found: OrphanSession[] = [];
      const keys = await kv.keys();
      for await (const key of keys) {
        if (held.has(key)) continue;
        const entry = await kv.get(key);
        if (!entry || entry.operation !== 'PUT') continue;
        const value = decode(entry.value);
        if (!value?.active || (value.node !== '' && value.expiresAt > now())) continue;
        const [tenant, sessionId] = key.split('.');
        if (tenant && sessionId) found.push({ tenant, sessionId });
      }
      return found;
    },
    async renewAll(onLost) {
      await Promise.all(
        [...held].map(async ([key, lease]) => {
          if ((await write(key, lease)) !== 'lost') return;
          const [tenant, sessionId] = key.split('.');
          if (tenant && sessionId) onLost(tenant, sessionId);
        }),
      );
    },
  };
}

/** True when a KV update failed because the key moved on (another writer), not for a transient reason. */
function isRevisionConflict(error: unknown): boolean {
  if (error instanceof JetStreamApiError) return error.code === WRONG_LAST_SEQUENCE;
  return error instanceof Error && /wrong last sequence/i.test(error.message);
}
