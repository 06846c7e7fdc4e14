import { KvWatchInclude } from '@nats-io/kv';
import type { KV } from '@nats-io/kv';
import type { Codec } from '../../../src/protocol/index.ts';
import type { Logger } from '../../../src/logging.ts';
import type { NodeLiveness } from './node-liveness.ts';
import { withTimeout } from '../../../src/with-timeout.ts';
import { isRevisionConflict } from '../../../src/bus/revision-conflict.ts';
import { rendezvousOwner } from './rendezvous.ts';
import { createReleasedMarkers, markerListing, markerRemoval, RELEASED_PREFIX } from './released-markers.ts';
import type { ReleasedMarkers } from './released-markers.ts';

/** A lease as stored in the KV bucket, one key per session (`<tenant>.<sessionId>`). */
interface LeaseValue {
  /** Owner node id; empty once released. The lease is the owner's while that node is alive ({@link NodeLiveness}). */
  readonly node: string;
  /** True while the session has a turn running or queued: a node that finds its owner dead resumes it. */
  readonly active: boolean;
}

/** A session another node should pick up. */
export interface OrphanSession {
  readonly tenant: string;
  readonly sessionId: string;
}

/** The outcome of a claim: held by this node, or the live node that holds it. */
export type ClaimResult =
  | { readonly held: true }
  /**
   * `owner: ''`: the claim could not be written (the bucket did not answer in time). `alone`: this node was the
   * only one to try (the pick of a settled fleet, see `presume`), so nobody else will answer the message.
   */
  | { readonly held: false; readonly owner: string; readonly alone?: boolean };

const HELD: ClaimResult = { held: true };

/**
 * Which node hosts which session. A node acts on a session only while it holds its lease. A lease names its
 * node and stays that node's for as long as the node is alive (its heartbeat, {@link NodeLiveness}): leases are
 * not renewed one by one, so a dead node's sessions are all free the moment it is found dead, whatever their
 * number. Compare-and-set on the KV revision makes every claim race have one winner, and the log's expected
 * last sequence stays the last defence of a single writer.
 */
export interface SessionLeases {
  /**
   * Takes the session's lease when it is free, released, or its node is dead; `held: false` with the owner
   * when a live node holds it. `active: true` writes the lease active in the same KV write that takes it (a
   * prompt's claim). A lease this node holds while its heartbeat is current is not read or written at all, so
   * its flag is left as it is: follow with `setActive`, which writes only when the flag changes.
   *
   * `presume: true` (a message every node heard, `broadcast` ingress): when nobody is known to hold the session
   * and the fleet's view is settled ({@link NodeLiveness.view}), only the node that rendezvous hashing picks
   * among the ready nodes asks the bucket; every other node answers at once with that node as the owner, so a
   * new session's first message costs the fleet one claim instead of one per node. The picked node claims for
   * real (and learns the true owner if another node held the session already); should it die first, the nodes
   * that kept the message for it claim when it is found dead, as for any holder.
   */
  claim(tenant: string, sessionId: string, options?: { active?: boolean; presume?: boolean }): Promise<ClaimResult>;
  /**
   * Records whether a held session has work, so a node that finds this one dead resumes it. Written through at
   * once: mark a session active before logging its prompt.
   */
  setActive(tenant: string, sessionId: string, active: boolean): Promise<void>;
  /** Gives a held lease back. An active session's lease stays visible as an orphan to resume. */
  release(tenant: string, sessionId: string): Promise<void>;
  /**
   * Removes the session's lease for good (a deleted session): held or not, its key is purged, so no node
   * finds it as an orphan to resume.
   */
  forget(tenant: string, sessionId: string): Promise<void>;
  /**
   * Active sessions with nobody to run them: released with work left, or held by a dead node, or by this
   * node's own id in an earlier life (a restarted node with a stable `AGENTBUS_NODE_ID` takes its own back at once).
   * Reads every lease of the bucket: for a node's start and a node found dead, not for a periodic sweep.
   * `complete: false` when the holder of some active lease could not be judged (its heartbeat could not be read):
   * read again later.
   */
  orphans(): Promise<{ readonly found: OrphanSession[]; readonly complete: boolean }>;
  /**
   * Sessions released with work left since the last call, found from their release markers
   * ({@link ReleasedMarkers}) instead of the whole bucket: the periodic sweep's read, costing what was released.
   * A marker stays until its lease has moved on, so a session found here and not claimed is found again.
   */
  released(): Promise<OrphanSession[]>;
  /** Writes again the release markers the bucket did not take (no I/O when none wait). */
  retryMarkers(): Promise<void>;
  /**
   * Claims that asked the bucket, and claims answered by rendezvous hashing without it (`presume`), since start.
   */
  counts(): { readonly asked: number; readonly presumed: number };
  /** Reads every held lease back (after this node lapsed); calls `onLost` for those another node took. */
  verifyAll(onLost: (tenant: string, sessionId: string) => void): Promise<void>;
}

/** Creates the lease manager of one node over a KV bucket. */
export function createSessionLeases(deps: {
  kv: KV;
  codec: Codec;
  liveness: NodeLiveness;
  logger: Logger;
  opTimeoutMs?: number;
  /** Markers of leases released with work; by default over `kv` itself (keys `released.<tenant>.<sessionId>`). */
  markers?: ReleasedMarkers;
}): SessionLeases {
  const { codec, liveness } = deps;
  // Every bucket operation is bounded: a lease claim must never stall a session's messages for good.
  const bound = deps.opTimeoutMs ?? 5_000;
  const markers = deps.markers ?? createReleasedMarkers({
      kv: deps.kv,
      codec,
      list: markerListing(deps.kv, codec, bound),
      remove: markerRemoval(deps.kv),
      logger: deps.logger,
      opTimeoutMs: bound,
    });
  const kv = {
    create: (key: string, value: Uint8Array) => withTimeout(deps.kv.create(key, value), bound, `lease create ${key}`),
    get: (key: string) => withTimeout(deps.kv.get(key), bound, `lease read ${key}`),
    update: (key: string, value: Uint8Array, revision: number) => withTimeout(deps.kv.update(key, value, revision), bound, `lease update ${key}`),
    delete: (key: string, options: { previousSeq: number }) => withTimeout(deps.kv.delete(key, options), bound, `lease delete ${key}`),
    purge: (key: string) => withTimeout(deps.kv.purge(key), bound, `lease purge ${key}`),
  };
  const nodeId = liveness.nodeId;
  interface HeldLease {
    revision: number;
    active: boolean;
    /** Writes of one lease run one after another, so compare-and-set never races itself; undefined when none runs. */
    chain: Promise<void> | undefined;
  }
  const held = new Map<string, HeldLease>();
  /** Leases whose release with work may or may not have been written (no answer): read back by `retryMarkers`. */
  const unsure = new Set<string>();
  const keyOf = (tenant: string, sessionId: string) => `${tenant}.${sessionId}`;
  const encode = (active: boolean, node = nodeId): Uint8Array => codec.encode({ node, active } satisfies LeaseValue);
  const decode = (bytes: Uint8Array): LeaseValue | undefined => {
    try {
      const value = codec.decode(bytes) as Partial<LeaseValue> | undefined;
      if (value && typeof value.node === 'string') return { node: value.node, active: value.active === true };
    } catch (err) {
      deps.logger.warn({ err }, 'unreadable lease');
    }
    return undefined;
  };

  // Claims of one key in flight: a second claim waits for the first instead of racing it. Raced, the loser
  // (this same node) read the winner's fresh lease, failed its compare-and-set and deleted the winner's record,
  // and its message (a second prompt sent at once to a new session) got no reply at all.
  /**
   * Calls `onLease` with every lease in the bucket now (its last value per key, deleted keys skipped), in one
   * pass: a watch's first entries are the bucket as it is, the last of them flagged `isUpdate`. An empty bucket
   * has nothing to deliver, so the bucket's status is asked first; the whole pass is bounded.
   */
  async function latestLeases(onLease: (key: string, value: LeaseValue) => void): Promise<void> {
    const status = await withTimeout(deps.kv.status(), bound, 'lease bucket status');
    if (status.values === 0) return;
    // The whole bucket, release markers included (a filtered watch with nothing to deliver would never end its pass).
    const watch = await withTimeout(deps.kv.watch({ include: KvWatchInclude.LastValue }), bound, 'lease listing');
    const pass = (async () => {
      for await (const entry of watch) {
        // A release marker (`released.<tenant>.<sessionId>`, three tokens) is not a lease.
        if (entry.operation === 'PUT' && !entry.key.startsWith(`${RELEASED_PREFIX}.`)) {
          const value = decode(entry.value);
          if (value) onLease(entry.key, value);
        }
        if (entry.isUpdate) break;
      }
    })();
    try {
      await withTimeout(pass, bound, 'lease listing');
    } finally {
      watch.stop();
    }
  }

  const claiming = new Map<string, Promise<ClaimResult>>();
  // Who holds the sessions this node does not: every node hears every message, and one held by a node
  // heard from within its TTL is not this node's to claim, so it costs no bucket operation at all. Entries of
  // a node found dead go at once; the map is cleared when it grows past its bound.
  const owners = new Map<string, string>();
  /** Claims answered by rendezvous hashing, without the bucket: a figure for the bench. */
  let presumedClaims = 0;
  let askedClaims = 0;
  const MAX_OWNERS = 100_000;
  const noteOwner = (key: string, owner: string) => {
    if (owner === '' || owner === nodeId) return;
    if (owners.size >= MAX_OWNERS) owners.clear();
    owners.set(key, owner);
  };
  liveness.onDead((node) => {
    for (const [key, owner] of owners) if (owner === node) owners.delete(key);
  });

  async function claim(tenant: string, sessionId: string, options: { active?: boolean; presume?: boolean } = {}): Promise<ClaimResult> {
    const key = keyOf(tenant, sessionId);
    // The common case, a lease held while this node is current, asks the bucket nothing.
    if (held.has(key) && liveness.selfCurrent() && !claiming.has(key)) return HELD;
    const owner = owners.get(key);
    if (owner !== undefined && !held.has(key) && liveness.heardFrom(owner)) return { held: false, owner };
    let alone = false;
    if (options.presume === true && !held.has(key) && !claiming.has(key)) {
      const view = liveness.view();
      const picked = view.settled ? rendezvousOwner(key, view.members) : undefined;
      if (picked !== undefined && picked !== nodeId) {
        presumedClaims += 1;
        noteOwner(key, picked);
        return { held: false, owner: picked };
      }
      alone = picked === nodeId;
    }
    for (let inFlight = claiming.get(key); inFlight; inFlight = claiming.get(key)) await inFlight.catch(() => undefined);
    askedClaims += 1;
    const attempt = claimOnce(key, options).then((result) => {
      if (result.held) owners.delete(key);
      else noteOwner(key, result.owner);
      return result;
    });
    claiming.set(key, attempt);
    try {
      const result = await attempt;
      return alone && !result.held && result.owner === '' ? { held: false, owner: '', alone } : result;
    } finally {
      if (claiming.get(key) === attempt) claiming.delete(key);
    }
  }

  async function claimOnce(key: string, options: { active?: boolean }): Promise<ClaimResult> {
    const mine = held.get(key);
    if (mine && liveness.selfCurrent()) return HELD;
    if (!mine) {
      // Most claims are of sessions nobody holds: try to create the key first, one KV write instead of a get and a write.
      try {
        const revision = await kv.create(key, encode(options.active === true));
        held.set(key, { revision, active: options.active === true, chain: undefined });
        return HELD;
      } catch {
        // The key exists (or existed): read it and take it over if it is free.
      }
    }
    const entry = await kv.get(key);
    const current = entry && entry.operation === 'PUT' ? decode(entry.value) : undefined;
    if (current && current.node !== '' && current.node !== nodeId && (await liveness.isAlive(current.node))) {
      if (mine) {
        deps.logger.warn({ key, owner: current.node }, 'lease lost');
        held.delete(key);
      }
      return { held: false, owner: current.node };
    }
    // Still ours, untouched (this node only lagged): nothing to write unless the flag must change.
    if (mine && current?.node === nodeId && entry!.revision === mine.revision && (mine.active || options.active !== true)) return HELD;
    const active = options.active === true || (mine?.active ?? current?.active ?? false);
    try {
      const revision = entry?.operation === 'PUT' ? await kv.update(key, encode(active), entry.revision) : await kv.create(key, encode(active));
      if (mine) {
        // Writes chained on this lease keep working on the same object.
        mine.revision = revision;
        mine.active = active;
      } else {
        held.set(key, { revision, active, chain: undefined });
      }
      return HELD;
    } catch (err) {
      if (!isRevisionConflict(err) && !/exists/i.test((err as Error).message ?? '')) {
        // A timeout or a reconnect: a lease still held stays held.
        deps.logger.info({ err, key }, 'lease claim not written this time');
        return mine ? HELD : { held: false, owner: current?.node ?? '' };
      }
      // Someone else won the race, or our own write did (applied, but its reply lost across a reconnect).
      const winner = await kv.get(key).catch(() => null);
      const value = winner && winner.operation === 'PUT' ? decode(winner.value) : undefined;
      if (winner && value?.node === nodeId) {
        if (mine) {
          mine.revision = winner.revision;
          mine.active = value.active;
        } else {
          held.set(key, { revision: winner.revision, active: value.active, chain: undefined });
        }
        return HELD;
      }
      held.delete(key);
      return { held: false, owner: value?.node ?? '' };
    }
  }

  /** Writes a held lease's `active` flag: `held`, `lost` when another node took it, `gone` once released. */
  function write(key: string, lease: HeldLease): Promise<'held' | 'lost' | 'gone'> {
    const attempt = (lease.chain ?? Promise.resolve()).then(async (): Promise<'held' | 'lost' | 'gone'> => {
      // A lost reply (a reconnect) may have applied an update: then the key holds our own write, and we write again.
      for (let tries = 0; tries < 3; tries += 1) {
        if (held.get(key) !== lease) return 'gone';
        try {
          lease.revision = await kv.update(key, encode(lease.active), lease.revision);
          return 'held';
        } catch (err) {
          if (!isRevisionConflict(err)) {
            deps.logger.info({ err, key }, 'lease not written this time');
            return 'held';
          }
          const current = await kv.get(key).catch(() => null);
          const value = current && current.operation === 'PUT' ? decode(current.value) : undefined;
          if (!current || value?.node !== nodeId) {
            deps.logger.warn({ err, key, owner: value?.node }, 'lease lost');
            held.delete(key);
            return 'lost';
          }
          lease.revision = current.revision;
        }
      }
      return 'held';
    });
    const chain: Promise<void> = attempt.then(() => {
      if (lease.chain === chain) lease.chain = undefined;
    });
    lease.chain = chain;
    return attempt;
  }

  return {
    claim,
    counts: () => ({ asked: askedClaims, presumed: presumedClaims }),
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
      let releasedAt: number;
      try {
        if (!lease.active) {
          await kv.delete(key, { previousSeq: lease.revision });
          return;
        }
        releasedAt = await kv.update(key, encode(true, ''), lease.revision);
      } catch (err) {
        deps.logger.warn({ err, key }, 'lease not released; it is free once this node is gone');
        // The write may have been applied with its reply lost (a reconnect): read back at the next sweep, and marked then.
        if (!isRevisionConflict(err)) unsure.add(key);
        return;
      }
      // After the lease, so a marker never names a release that did not happen. Should this node die between the
      // two, the nodes that find it dead read every lease; should the bucket not answer, the marker is written again.
      await markers.mark(key, releasedAt);
    },
    async forget(tenant, sessionId) {
      const key = keyOf(tenant, sessionId);
      const lease = held.get(key);
      if (lease) {
        // A write in flight would write the key again after the purge.
        await lease.chain;
        held.delete(key);
      }
      await kv.purge(key);
    },
    async orphans() {
      const found: OrphanSession[] = [];
      const candidates: Array<{ key: string; node: string }> = [];
      // One pass over the bucket with each lease's value (an ordered consumer, last value per key), not a key
      // listing plus a read per key: a node that does not know a lease's owner (in `queue` ingress it hears only
      // its share of the messages) read every such key on every sweep, a cost of nodes × leases.
      await latestLeases((key, value) => {
        if (held.has(key) || !value.active) return;
        candidates.push({ key, node: value.node });
      });
      let complete = true;
      for (const { key, node } of candidates) {
        if (node !== '' && node !== nodeId && (await liveness.isAlive(node))) {
          // Alive for want of an answer: its heartbeat could not be read. A node liveness knows is judged again by its
          // own sweep (and this read made again when it is found dead); one it does not know is nobody's to judge.
          if (!liveness.heardFrom(node) && !liveness.knows(node)) complete = false;
          continue;
        }
        const [tenant, sessionId] = key.split('.');
        if (tenant && sessionId) found.push({ tenant, sessionId });
      }
      return { found, complete };
    },
    async released() {
      const found: OrphanSession[] = [];
      const readRevision = async (key: string) => (await kv.get(key))?.revision ?? null;
      for (const { key } of await markers.pending(readRevision)) {
        if (held.has(key)) continue;
        const [tenant, sessionId] = key.split('.');
        if (tenant && sessionId) found.push({ tenant, sessionId });
      }
      return found;
    },
    async retryMarkers() {
      for (const key of [...unsure]) {
        const entry = await kv.get(key);
        unsure.delete(key);
        const value = entry && entry.operation === 'PUT' ? decode(entry.value) : undefined;
        if (entry && value?.node === '' && value.active) await markers.mark(key, entry.revision);
      }
      await markers.retry();
    },
    async verifyAll(onLost) {
      await Promise.all(
        [...held].map(async ([key, lease]) => {
          const current = await kv.get(key);
          const value = current && current.operation === 'PUT' ? decode(current.value) : undefined;
          if (current && value?.node === nodeId) {
            if (current.revision !== lease.revision) lease.revision = current.revision;
            return;
          }
          if (held.get(key) !== lease) return;
          held.delete(key);
          deps.logger.warn({ key, owner: value?.node }, 'lease lost while this node was silent');
          const [tenant, sessionId] = key.split('.');
          if (tenant && sessionId) onLost(tenant, sessionId);
        }),
      );
    },
  };
}

