import type { SessionLog } from '../../../src/bus/session-log.ts';
import { withTimeout } from '../../../src/with-timeout.ts';

/** How long a writer looks for appends whose acknowledgement was lost before it gives up on knowing. */
export const UNACKED_LOOKUP_TIMEOUT_MS = 10_000;

/** What the log holds past the writer's last known sequence, against the appends it sent unacknowledged. */
export type UnackedOutcome =
  /** The first `seqs.length` of the appends, stored at these sequences, and no other event of the session. */
  | { readonly kind: 'ours'; readonly seqs: readonly number[] }
  /** Another event of the session is there (another writer's, or this one's out of order): the writer is stale. */
  | { readonly kind: 'foreign' };

/**
 * Reads what the log of a session holds past `after` (the last sequence its writer knows) once appends of the
 * events `ids` (in the order sent) got no acknowledgement: JetStream may have stored them and lost the reply.
 * Each event's id is its `Nats-Msg-Id`, and the writer is the session's only one while it holds the lease, so
 * valid events there that are exactly a prefix of `ids`, in order, are this writer's appends, stored; anything
 * else (an event of the session not next in `ids`) means another writer. Invalid messages are skipped (and
 * reported) by the read, as when a session is opened. Resolves undefined when the log cannot be read within
 * `timeoutMs` (default {@link UNACKED_LOOKUP_TIMEOUT_MS}), or at all: nothing is known.
 */
export async function findUnacked(
  log: SessionLog,
  where: { readonly tenant: string; readonly sessionId: string; readonly after: number },
  ids: readonly string[],
  options: { readonly timeoutMs?: number } = {},
): Promise<UnackedOutcome | undefined> {
  const timeoutMs = options.timeoutMs ?? UNACKED_LOOKUP_TIMEOUT_MS;
  let read;
  try {
    // One event more than sent is enough to tell another writer's (a stale writer need not read a busy tail).
    // The read's own bound covers its consumer, not the lookup of the last sequence before it: this one covers all.
    const reading = log.read(where.tenant, where.sessionId, { after: where.after, timeoutMs, limit: ids.length + 1 });
    read = await withTimeout(reading, timeoutMs, `reading the log of ${where.tenant}/${where.sessionId} past ${where.after}`);
  } catch {
    // Nothing is known: the caller keeps the append's own failure.
    return undefined;
  }
  const seqs: number[] = [];
  for (const event of read.events) {
    if (event.id !== ids[seqs.length] || event.seq === undefined) return { kind: 'foreign' };
    seqs.push(event.seq);
  }
  return { kind: 'ours', seqs };
}
