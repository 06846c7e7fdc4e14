import type { KV } from '@nats-io/kv';
import type { Codec } from '../../../src/protocol/index.ts';
import type { Logger } from '../../../src/logging.ts';
import { withTimeout } from '../../../src/with-timeout.ts';

/** A node's heartbeat as stored in the nodes bucket, one key per node id. */
interface Heartbeat {
  /** How long the node's sessions stay its own after its last heartbeat. */
  readonly ttlMs: number;
  /** The writer's wall clock, for people reading the bucket; liveness never compares clocks of two nodes. */
  readonly at: number;
  /**
   * True while the node takes session messages (its ingress is subscribed). A heartbeat without it (a node
   * older than this field) counts as ready.
   */
  readonly ready?: boolean;
}

/** What this node last heard of another one. */
interface Seen {
  /** Local monotonic time of the last sign of life: a heartbeat the watch delivered, or a newer one a check found. */
  at: number;
  /** KV revision of that heartbeat; a later check that finds the same revision finds the node silent. */
  revision: number;
  dead: boolean;
  /** What its last heartbeat said of its ingress ({@link Heartbeat.ready}). */
  ready: boolean;
}

/** The nodes this one knows to take session messages now, and whether that knowledge is settled. */
export interface FleetView {
  /** This node (when ready) and every node heard from within the TTL whose heartbeat says it is ready. */
  readonly members: readonly string[];
  /**
   * True when every node's view is the same as far as this one can tell: no node joined, left, changed its
   * readiness or missed two heartbeats for a whole TTL, and this node's own heartbeat is current. Only a settled
   * view may be used to agree on something without asking the bucket.
   */
  readonly settled: boolean;
}

/**
 * How one runtime node sees which nodes are alive, itself included. Every node writes a heartbeat to a KV
 * bucket every `ttlMs / 4` and watches everyone else's: a node whose heartbeat has not been seen for `ttlMs`,
 * and whose key still holds the same revision when read directly (so a slow watch cannot kill it), is dead,
 * and its sessions are free to take. A node that stops deletes its key, and is dead at once. Only local
 * monotonic time is compared: no two nodes' clocks.
 */
export interface NodeLiveness {
  readonly nodeId: string;
  /**
   * True while this node's own heartbeats are acknowledged well within the TTL: no other node can have found
   * it dead, so it may act on the leases it holds without reading them again.
   */
  selfCurrent(): boolean;
  /**
   * Whether `node` is alive. A heartbeat seen within the TTL answers at once; a silent node is checked with
   * one KV read. While this node's own heartbeat has not been current for a whole TTL (it just started, or
   * was cut off or paused), nobody else is judged dead: it may be this node that lagged.
   */
  isAlive(node: string): Promise<boolean>;
  /** True when `node`'s heartbeat was seen within the TTL: alive, with no I/O to ask. */
  heardFrom(node: string): boolean;
  /**
   * True when this node has a record of `node` (heard, read, or found dead): such a node is judged again by the
   * liveness sweep until it is heard or found dead ({@link onDead}). False for a node whose heartbeat could not be read.
   */
  knows(node: string): boolean;
  /**
   * The fleet as this node sees it now ({@link FleetView}). Cheap: no I/O, one pass over the nodes known.
   */
  view(): FleetView;
  /**
   * Says in this node's heartbeats whether it takes session messages: call with `true` once its ingress is
   * subscribed and with `false` when it starts to stop. A heartbeat goes out at once.
   */
  markReady(ready: boolean): void;
  /** Calls `listener` with each node found dead: its heartbeat lapsed (and a read confirmed it), or it said goodbye. */
  onDead(listener: (node: string) => void): void;
  /**
   * Calls `listener` when this node's own heartbeat was not acknowledged for longer than the TTL (it was paused,
   * or cut off from the server): others may have taken its sessions, so it must check the leases it holds.
   * `selfCurrent()` stays false until the listener settles.
   */
  onSelfLapse(listener: () => Promise<void>): void;
  /** Stops heartbeating and deletes this node's key, so the others take its sessions at once. */
  stop(): Promise<void>;
}

/** Options of {@link startNodeLiveness}. */
export interface NodeLivenessOptions {
  readonly kv: KV;
  readonly codec: Codec;
  readonly nodeId: string;
  readonly ttlMs: number;
  readonly logger: Logger;
  /** Monotonic milliseconds; `performance.now` by default. */
  readonly clock?: () => number;
  /** Wall clock, only to tell a heartbeat key left by a node long gone; `Date.now` by default. */
  readonly wallClock?: () => number;
}

/**
 * Writes this node's first heartbeat, then keeps writing and watching.
 *
 * @example
 * const liveness = await startNodeLiveness({ kv: nodesBucket, codec, nodeId: 'node-a', ttlMs: 2000, logger });
 * liveness.onDead((node) => logger.info({ node }, 'node gone'));
 */
export async function startNodeLiveness(options: NodeLivenessOptions): Promise<NodeLiveness> {
  const { kv, codec, nodeId, ttlMs, logger } = options;
  const clock = options.clock ?? (() => performance.now());
  const wallClock = options.wallClock ?? Date.now;
  const seen = new Map<string, Seen>();
  const checking = new Map<string, Promise<boolean>>();
  const deadListeners: Array<(node: string) => void> = [];
  const lapseListeners: Array<() => Promise<void>> = [];
  let stopped = false;
  /** When the last acknowledged heartbeat was sent. */
  let lastAckedSend = -Infinity;
  /** Since when this node's heartbeats have been acknowledged without a lapse. */
  let currentSince = Infinity;
  let lapsed = false;
  let writing = false;
  let selfReady = false;
  /** When the membership last changed as this node sees it (a node joined, left, or changed its readiness). */
  let lastChange = clock();
  const changed = () => {
    lastChange = clock();
  };
  const readyOf = (value: Uint8Array): boolean => {
    try {
      return (codec.decode(value) as Partial<Heartbeat> | undefined)?.ready !== false;
    } catch {
      return true;
    }
  };

  const declareDead = (node: string, why: string) => {
    const known = seen.get(node);
    if (known?.dead) return;
    if (known) known.dead = true;
    else seen.set(node, { at: -Infinity, revision: 0, dead: true, ready: false });
    changed();
    logger.warn({ peer: node, why }, 'runtime node found dead; its sessions are free to take');
    for (const listener of deadListeners) listener(node);
  };

  async function beat(): Promise<void> {
    if (writing || stopped) return;
    writing = true;
    const sentAt = clock();
    // Not acknowledged for longer than the TTL: others may have found this node dead meanwhile.
    if (lastAckedSend !== -Infinity && sentAt - lastAckedSend > ttlMs && !lapsed) {
      lapsed = true;
      logger.warn({ silentMs: Math.round(sentAt - lastAckedSend) }, 'own heartbeat lapsed; checking the leases held');
    }
    try {
      await withTimeout(kv.put(nodeId, codec.encode({ ttlMs, at: wallClock(), ready: selfReady } satisfies Heartbeat)), ttlMs, 'heartbeat write');
      lastAckedSend = sentAt;
      if (lapsed) {
        try {
          for (const listener of lapseListeners) await listener();
          lapsed = false;
          currentSince = clock();
        } catch (err) {
          // Still unsure what this node holds: it stays lapsed and checks again at the next heartbeat.
          logger.warn({ err }, 'leases not checked after a lapse; trying again');
        }
      } else if (currentSince === Infinity) {
        currentSince = sentAt;
      }
    } catch (err) {
      logger.info({ err }, 'heartbeat not written this time');
    } finally {
      writing = false;
    }
  }

  /** True once this node has been current for a whole TTL: only then may it judge another node dead. */
  const judging = () => !lapsed && clock() - lastAckedSend < ttlMs && clock() - currentSince >= ttlMs;

  async function check(node: string): Promise<boolean> {
    const entry = await withTimeout(kv.get(node), ttlMs, `heartbeat read of ${node}`);
    const known = seen.get(node);
    if (!entry || entry.operation !== 'PUT') return false;
    const newer = known === undefined || entry.revision > known.revision;
    // A key nobody rewrote for many TTLs is a node long gone (a rough wall-clock test, tolerant of skew).
    const recent = wallClock() - entry.created.getTime() < Math.max(10 * ttlMs, 30_000);
    if (newer && recent) {
      const ready = readyOf(entry.value);
      if (!known || known.dead || known.ready !== ready) changed();
      seen.set(node, { at: clock(), revision: entry.revision, dead: false, ready });
      return true;
    }
    return false;
  }

  /** True when `node` is this one, or its heartbeat was seen within the TTL. */
  function heardFrom(node: string): boolean {
    if (node === nodeId) return true;
    const known = seen.get(node);
    return known !== undefined && !known.dead && clock() - known.at <= ttlMs;
  }

  async function isAlive(node: string): Promise<boolean> {
    if (heardFrom(node)) return true;
    const known = seen.get(node);
    if (known?.dead) return false;
    if (known && !judging()) return true;
    let pending = checking.get(node);
    if (!pending) {
      pending = check(node).finally(() => checking.delete(node));
      checking.set(node, pending);
    }
    try {
      const alive = await pending;
      if (!alive) declareDead(node, known ? 'heartbeat silent' : 'no recent heartbeat');
      return alive;
    } catch (err) {
      // Unsure (not connected): the node keeps its sessions until a read can tell.
      logger.info({ err, peer: node }, 'node liveness not checked this time');
      return true;
    }
  }

  // The bucket's last revision before the watch starts: its entries up to there are the bucket as it was. nats.js
  // marks the last of those an update (`isUpdate`), so a node that stopped just before this one started (the previous
  // `agentbus ask` in the same folder) was reported found dead on every start.
  const before = (await kv.status()).streamInfo.state.last_seq;
  const watch = await kv.watch();
  void (async () => {
    for await (const entry of watch) {
      if (entry.key === nodeId) continue;
      const update = entry.isUpdate && entry.revision > before;
      if (entry.operation === 'PUT') {
        const known = seen.get(entry.key);
        if (known && entry.revision <= known.revision) continue;
        // The watch's first entries are the bucket as it was: a key there is not a sign of life by itself.
        if (!update && !known) continue;
        if (known?.dead) logger.info({ peer: entry.key }, 'runtime node heard again');
        const ready = readyOf(entry.value);
        if (!known || known.dead || known.ready !== ready) changed();
        seen.set(entry.key, { at: clock(), revision: entry.revision, dead: false, ready });
      } else if (update) {
        declareDead(entry.key, 'it stopped');
      }
    }
  })().catch((err: unknown) => logger.warn({ err }, 'node heartbeat watch stopped'));

  await beat();
  const heartbeat = setInterval(() => void beat(), Math.max(50, Math.floor(ttlMs / 4)));
  // Every silent node is checked as soon as this node may judge: that is what finds a dead node's idle work.
  const sweep = setInterval(() => {
    if (!judging()) return;
    for (const [node, known] of seen) {
      if (!known.dead && clock() - known.at > ttlMs) void isAlive(node);
    }
  }, Math.max(25, Math.floor(ttlMs / 8)));

  function view(): FleetView {
    const now = clock();
    // A whole TTL without a change: every node has had four heartbeats to hear what this one heard.
    let settled = selfReady && judging() && now - lastChange >= ttlMs;
    const members: string[] = selfReady ? [nodeId] : [];
    for (const [node, known] of seen) {
      if (known.dead) continue;
      const silentMs = now - known.at;
      // Two heartbeats missed: the node may be dying, and others may stop counting it before this one does.
      if (silentMs > ttlMs / 2) settled = false;
      if (silentMs <= ttlMs && known.ready) members.push(node);
    }
    return { members, settled };
  }

  return {
    nodeId,
    selfCurrent: () => !lapsed && clock() - lastAckedSend < (ttlMs * 3) / 4,
    isAlive,
    heardFrom,
    knows: (node) => node === nodeId || seen.has(node),
    view,
    markReady(ready) {
      if (ready === selfReady) return;
      selfReady = ready;
      changed();
      void beat();
    },
    onDead: (listener) => void deadListeners.push(listener),
    onSelfLapse: (listener) => void lapseListeners.push(listener),
    async stop() {
      stopped = true;
      clearInterval(heartbeat);
      clearInterval(sweep);
      watch.stop();
      await withTimeout(kv.delete(nodeId), ttlMs, 'heartbeat delete').catch((err: unknown) => logger.warn({ err }, 'heartbeat not deleted; other nodes will find this one silent'));
    },
  };
}
