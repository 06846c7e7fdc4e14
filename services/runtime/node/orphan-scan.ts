import { KvWatchInclude } from '@nats-io/kv';
import type { KV } from '@nats-io/kv';
import { withTimeout } from '../../../src/with-timeout.ts';
import type { NodeLiveness } from './node-liveness.ts';
import { sessionOfKey } from './lease-store.ts';
import type { LeaseStore, LeaseValue, OrphanSession } from './lease-store.ts';
import { isMarkerKey } from './released-markers.ts';
import type { LeaseDeleteMarkers } from './lease-delete-markers.ts';

/**
 * Calls `onLease` with every lease in the bucket now (its last value per key), in one pass: a watch's first entries
 * are the bucket as it is, the last of them flagged `isUpdate`. A deleted or purged lease key goes to `onRemoved`
 * with its marker's stream sequence and time, to compact. An empty bucket has nothing to deliver, so the bucket's
 * status is asked first; the whole pass is bounded by `opTimeoutMs`.
 */
export async function latestLeases(
  deps: { kv: KV; store: Pick<LeaseStore, 'decode'>; opTimeoutMs: number },
  onLease: (key: string, value: LeaseValue) => void,
  onRemoved?: (key: string, seq: number, at: number) => void,
): Promise<void> {
  const { kv, opTimeoutMs: bound } = deps;
  const status = await withTimeout(kv.status(), bound, 'lease bucket status');
  if (status.values === 0) return;
  // The whole bucket, release markers included (a filtered watch with nothing to deliver would never end its pass).
  const watch = await withTimeout(kv.watch({ include: KvWatchInclude.LastValue }), bound, 'lease listing');
  const pass = (async () => {
    for await (const entry of watch) {
      // A release marker (`released.<tenant>.<sessionId>`, three tokens) is not a lease.
      if (!isMarkerKey(entry.key)) {
        if (entry.operation === 'PUT') {
          const value = deps.store.decode(entry.value);
          if (value) onLease(entry.key, value);
        } else {
          onRemoved?.(entry.key, entry.revision, entry.created.getTime());
        }
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

/**
 * Active sessions with nobody to run them, from one full read of the bucket: released with work left, held by a
 * dead node, or by this node's own id in an earlier life. Leases this node holds (`isHeld`) are skipped.
 * `complete: false` when the holder of some active lease could not be judged (its heartbeat could not be read).
 * The lease delete markers read on the way go to `deleteMarkers`, to compact.
 */
export async function scanOrphans(deps: {
  kv: KV;
  store: Pick<LeaseStore, 'decode'>;
  liveness: NodeLiveness;
  opTimeoutMs: number;
  isHeld: (key: string) => boolean;
  deleteMarkers?: Pick<LeaseDeleteMarkers, 'found'>;
}): Promise<{ readonly found: OrphanSession[]; readonly complete: boolean }> {
  const { liveness } = deps;
  const nodeId = liveness.nodeId;
  const found: OrphanSession[] = [];
  const candidates: Array<{ key: string; node: string }> = [];
  // One pass over the bucket with each lease's value (an ordered consumer, last value per key), not a key
  // listing plus a read per key: a node that does not know a lease's owner (in `queue` ingress it hears only
  // its share of the messages) read every such key on every sweep, a cost of nodes × leases.
  await latestLeases(
    deps,
    (key, value) => {
      if (deps.isHeld(key) || !value.active) return;
      candidates.push({ key, node: value.node });
    },
    (key, seq, at) => deps.deleteMarkers?.found(key, seq, at),
  );
  let complete = true;
  for (const { key, node } of candidates) {
    if (node !== '' && node !== nodeId && (await liveness.isAlive(node))) {
      // Alive for want of an answer: its heartbeat could not be read. A node liveness knows is judged again by its
      // own sweep (and this read made again when it is found dead); one it does not know is nobody's to judge.
      if (!liveness.heardFrom(node) && !liveness.knows(node)) complete = false;
      continue;
    }
    const session = sessionOfKey(key);
    if (session) found.push(session);
  }
  return { found, complete };
}
