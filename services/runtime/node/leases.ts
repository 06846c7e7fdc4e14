import type { KV } from '@nats-io/kv';
import type { Codec } from '../../../src/protocol/index.ts';
import type { Logger } from '../../../src/logging.ts';
import { isRevisionConflict } from '../../../src/bus/revision-conflict.ts';
import { createKnownOwners } from './known-owners.ts';
import { createLeaseStore, leaseKey, sessionOfKey } from './lease-store.ts';
import type { OrphanSession } from './lease-store.ts';
import type { NodeLiveness } from './node-liveness.ts';
import { scanOrphans } from './orphan-scan.ts';
import { markerListing, markerRemoval } from './marker-stream.ts';
import { createReleasedMarkers } from './released-markers.ts';
import type { ReleasedMarkers } from './released-markers.ts';
import { createReleasedSessions } from './released-sessions.ts';
import { createLeaseDeleteMarkers, deleteMarkerRemoval } from './lease-delete-markers.ts';
import type { LeaseDeleteMarkers } from './lease-delete-markers.ts';
import { rendezvousOwner } from './rendezvous.ts';

export type { OrphanSession } from './lease-store.ts';

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
  /**
   * Writes again the release markers the bucket did not take, and compacts the lease delete markers due
   * ({@link LeaseDeleteMarkers}); no I/O when neither waits. Every node's maintenance, every other tick.
   */
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
  /** The lease delete markers to compact; by default purged from `kv`'s stream a minute after they are written. */
  deleteMarkers?: LeaseDeleteMarkers;
}): SessionLeases {
  const { codec, liveness } = deps;
  // Every bucket operation is bounded: a lease claim must never stall a session's messages for good.
  const bound = deps.opTimeoutMs ?? 5_000;
  const kv = createLeaseStore({ kv: deps.kv, codec, logger: deps.logger, opTimeoutMs: bound });
  const markers =
    deps.markers ??
    createReleasedMarkers({ kv: deps.kv, codec, list: markerListing(deps.kv, codec, bound), remove: markerRemoval(deps.kv), logger: deps.logger, opTimeoutMs: bound });
  const releases = createReleasedSessions({ store: kv, markers });
  const deleteMarkers = deps.deleteMarkers ?? createLeaseDeleteMarkers({ remove: deleteMarkerRemoval(deps.kv), logger: deps.logger, opTimeoutMs: bound });
  const nodeId = liveness.nodeId;
  interface HeldLease {
    revision: number;
    active: boolean;
    /** Writes of one lease run one after another, so compare-and-set never races itself; undefined when none runs. */
    chain: Promise<void> | undefined;
  }
  const held = new Map<string, HeldLease>();
  const isHeld = (key: string) => held.has(key);
  // Claims of one key in flight: a second claim waits for the first instead of racing it. Raced, the loser
  // (this same node) read the winner's fresh lease, failed its compare-and-set and deleted the winner's record,
  // and its message (a second prompt sent at once to a new session) got no reply at all.
  const claiming = new Map<string, Promise<ClaimResult>>();
  const owners = createKnownOwners(liveness);
  /** Claims answered by rendezvous hashing, without the bucket: a figure for the bench. */
  let presumedClaims = 0;
  let askedClaims = 0;

  async function claim(tenant: string, sessionId: string, options: { active?: boolean; presume?: boolean } = {}): Promise<ClaimResult> {
    const key = leaseKey(tenant, sessionId);
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
        owners.note(key, picked);
        return { held: false, owner: picked };
      }
      alone = picked === nodeId;
    }
    for (let inFlight = claiming.get(key); inFlight; inFlight = claiming.get(key)) await inFlight.catch(() => undefined);
    askedClaims += 1;
    const attempt = claimOnce(key, options).then((result) => {
      if (result.held) owners.delete(key);
      else owners.note(key, result.owner);
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
        const revision = await kv.create(key, { node: nodeId, active: options.active === true });
        held.set(key, { revision, active: options.active === true, chain: undefined });
        return HELD;
      } catch {
        // The key exists (or existed): read it and take it over if it is free.
      }
    }
    const entry = await kv.get(key);
    const current = kv.valueOf(entry);
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
      const revision = entry?.operation === 'PUT' ? await kv.update(key, { node: nodeId, active }, entry.revision) : await kv.create(key, { node: nodeId, active });
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
      const value = kv.valueOf(winner);
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
          lease.revision = await kv.update(key, { node: nodeId, active: lease.active }, lease.revision);
          return 'held';
        } catch (err) {
          if (!isRevisionConflict(err)) {
            deps.logger.info({ err, key }, 'lease not written this time');
            return 'held';
          }
          const current = await kv.get(key).catch(() => null);
          const value = kv.valueOf(current);
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
      const key = leaseKey(tenant, sessionId);
      const lease = held.get(key);
      if (!lease || lease.active === active) return;
      lease.active = active;
      await write(key, lease);
    },
    async release(tenant, sessionId) {
      const key = leaseKey(tenant, sessionId);
      const lease = held.get(key);
      if (!lease) return;
      await lease.chain;
      held.delete(key);
      let releasedAt: number;
      try {
        if (!lease.active) {
          // Deleted, not purged, so the bucket's watchers see the release; the delete marker is compacted later.
          deleteMarkers.wrote(key, await kv.delete(key, lease.revision));
          return;
        }
        releasedAt = await kv.update(key, { node: '', active: true }, lease.revision);
      } catch (err) {
        deps.logger.warn({ err, key }, 'lease not released; it is free once this node is gone');
        // The write may have been applied with its reply lost (a reconnect): read back at the next sweep, and marked then.
        if (!isRevisionConflict(err)) releases.unsure(key);
        return;
      }
      // After the lease, so a marker never names a release that did not happen (see `ReleasedSessions.mark`).
      await releases.mark(key, releasedAt);
    },
    async forget(tenant, sessionId) {
      const key = leaseKey(tenant, sessionId);
      const lease = held.get(key);
      if (lease) {
        // A write in flight would write the key again after the purge.
        await lease.chain;
        held.delete(key);
      }
      deleteMarkers.wrote(key, await kv.purge(key));
    },
    orphans: () => scanOrphans({ kv: deps.kv, store: kv, liveness, opTimeoutMs: bound, isHeld, deleteMarkers }),
    released: () => releases.found(isHeld),
    async retryMarkers() {
      await releases.retry();
      await deleteMarkers.compact();
    },
    async verifyAll(onLost) {
      await Promise.all(
        [...held].map(async ([key, lease]) => {
          const current = await kv.get(key);
          const value = kv.valueOf(current);
          if (current && value?.node === nodeId) {
            if (current.revision !== lease.revision) lease.revision = current.revision;
            return;
          }
          if (held.get(key) !== lease) return;
          held.delete(key);
          deps.logger.warn({ key, owner: value?.node }, 'lease lost while this node was silent');
          const session = sessionOfKey(key);
          if (session) onLost(session.tenant, session.sessionId);
        }),
      );
    },
  };
}

