import type { JetStreamManager } from '@nats-io/jetstream';
import type { SessionLog } from '../../../src/bus/session-log.ts';
import { AgentbusError, ErrorCode, SessionBusyError, SessionDeletedError } from '../../../src/errors.ts';
import type { Logger } from '../../../src/logging.ts';
import type { Subjects } from '../../../src/protocol/index.ts';
import type { SessionLeases } from '../node/leases.ts';
import type { SessionHost } from './session-host.ts';
import type { RuntimeTombstones } from './tombstones.ts';

/** What a delete did: log messages purged, and whether an earlier delete had already written the tombstone. */
export interface DeleteOutcome {
  readonly purged: number;
  readonly alreadyDeleted: boolean;
}

/** Where a session's delete stands on this node: `checking` until its tombstone is written, then `tombstoned`. */
export type DeletePhase = 'checking' | 'tombstoned';

/** Deletes sessions this node holds the lease of. */
export interface SessionDeleter {
  /**
   * Deletes a session: refuses with `busy` while a turn runs or waits (cancel it first; a turn that is ending is
   * given up to a second to leave) or another message of
   * the session is being handled here, with `not_found` when it never existed. Writes its tombstone, stops
   * hosting it, purges its log and live messages, and removes its lease. A delete of a deleted session finishes
   * whatever an interrupted one left (`alreadyDeleted`).
   */
  delete(tenant: string, sessionId: string): Promise<DeleteOutcome>;
  /** Where a delete of the session running on this node now stands; undefined when none runs. */
  phase(tenant: string, sessionId: string): DeletePhase | undefined;
  /** Throws the error a message to the session gets while it is being deleted here (see {@link phase}). */
  refuseWhileDeleting(tenant: string, sessionId: string): void;
}

/** What the deleter needs of the runtime. */
export interface SessionDeleterDeps {
  readonly jsm: JetStreamManager;
  /** The log and live streams, and the stream of the tool workers' result ledger (`KV_<bucket>`). */
  readonly streams: { readonly log: string; readonly live: string; readonly ledger: string };
  readonly subjects: Subjects;
  readonly log: Pick<SessionLog, 'lastSeq'>;
  readonly tombstones: RuntimeTombstones;
  readonly leases: Pick<SessionLeases, 'forget'>;
  /** The session's host when this node hosts it (an opening one awaited), else undefined. Never opens one. */
  readonly hostedSession: (tenant: string, sessionId: string) => Promise<SessionHost | undefined>;
  /** How many other messages of the session this node is handling now. */
  readonly othersInFlight: (tenant: string, sessionId: string) => number;
  /** Stops hosting the session on this node, without touching its lease. */
  readonly drop: (tenant: string, sessionId: string) => void;
  readonly logger: Logger;
}

/** How long a delete waits for a session that is ending its turn before it refuses it `busy`. */
const IDLE_GRACE_MS = 1000;

/** True once the session is idle; false when it stopped meanwhile (given up, handed over) or `ms` passed first. */
async function untilIdle(hosted: SessionHost, ms: number): Promise<boolean> {
  let timer: ReturnType<typeof setTimeout> | undefined;
  const expired = new Promise<boolean>((resolve) => (timer = setTimeout(() => resolve(false), ms)));
  return Promise.race([hosted.whenIdle(), expired]).finally(() => clearTimeout(timer));
}

/**
 * Creates the deleter. A running turn is refused rather than cancelled: a cancel ends the turn with events
 * of its own (`tool.result`s, `turn.ended`) and queued prompts would start the next turn, so a delete that
 * cancelled first would race its own session; a client that means it sends `cancel`, then `delete`.
 */
export function createSessionDeleter(deps: SessionDeleterDeps): SessionDeleter {
  const { subjects, logger } = deps;
  const phases = new Map<string, DeletePhase>();
  const keyOf = (tenant: string, sessionId: string) => `${tenant}.${sessionId}`;

  async function purge(stream: string, filter: string): Promise<number> {
    return (await deps.jsm.streams.purge(stream, { filter })).purged;
  }

  return {
    phase: (tenant, sessionId) => phases.get(keyOf(tenant, sessionId)),

    refuseWhileDeleting(tenant, sessionId) {
      const phase = phases.get(keyOf(tenant, sessionId));
      if (phase === 'tombstoned') throw new SessionDeletedError(`session ${tenant}/${sessionId} was deleted`, { tenant, sessionId });
      if (phase === 'checking') throw new SessionBusyError(`session ${tenant}/${sessionId} is being deleted`, { tenant, sessionId });
    },

    async delete(tenant, sessionId) {
      const key = keyOf(tenant, sessionId);
      if (phases.has(key)) throw new SessionBusyError(`session ${tenant}/${sessionId} is being deleted`, { tenant, sessionId });
      const hosted = await deps.hostedSession(tenant, sessionId);
      // A client that saw `turn.ended` (its own turn, or the one it cancelled) deletes at once; the session leaves
      // its turn a moment after that event is logged. Wait that moment rather than refuse a delete that is right;
      // but a session stopped meanwhile (given up, handed over, reopened) is not this node's to delete now.
      if (hosted?.busy()) {
        const idle = await untilIdle(hosted, IDLE_GRACE_MS);
        if (!idle || (await deps.hostedSession(tenant, sessionId)) !== hosted) {
          throw new SessionBusyError(`session ${tenant}/${sessionId} has a turn running or queued: cancel it, then delete`, { tenant, sessionId });
        }
      }
      // From this check to the phase being set nothing awaits: no prompt of this node slips in between.
      if (phases.has(key)) throw new SessionBusyError(`session ${tenant}/${sessionId} is being deleted`, { tenant, sessionId });
      if (hosted?.busy() || deps.othersInFlight(tenant, sessionId) > 0) {
        throw new SessionBusyError(`session ${tenant}/${sessionId} has a turn running or queued: cancel it, then delete`, { tenant, sessionId });
      }
      phases.set(key, 'checking');
      try {
        const [deleted, lastSeq] = await Promise.all([deps.tombstones.isDeleted(tenant, sessionId), deps.log.lastSeq(tenant, sessionId)]);
        if (!deleted && lastSeq === 0) throw new AgentbusError(ErrorCode.notFound, `session ${tenant}/${sessionId} does not exist`);
        // The tombstone first: once it is there the id is refused everywhere, whatever fails after it.
        const created = await deps.tombstones.mark(tenant, sessionId);
        phases.set(key, 'tombstoned');
        hosted?.stop();
        deps.drop(tenant, sessionId);
        const purged = await purge(deps.streams.log, subjects.log(tenant, sessionId));
        try {
          await purge(deps.streams.live, `${subjects.prefix}.${tenant}.sessions.${sessionId}.live.>`);
        } catch (err) {
          // Live events age out within minutes anyway; the log is what must go.
          logger.warn({ err, tenant, sessionId }, 'live events of a deleted session not purged; they expire with the live stream');
        }
        try {
          // The outcomes tool workers recorded for the session's calls (keys `<tenant>.<sessionId>.<digest>`).
          await purge(deps.streams.ledger, `$KV.${deps.streams.ledger.slice('KV_'.length)}.${tenant}.${sessionId}.>`);
        } catch (err) {
          logger.warn({ err, tenant, sessionId }, 'recorded tool outcomes of a deleted session not purged; they expire with the ledger');
        }
        await deps.leases.forget(tenant, sessionId);
        logger.info({ tenant, sessionId, purged, alreadyDeleted: !created }, 'session deleted');
        return { purged, alreadyDeleted: !created };
      } finally {
        phases.delete(key);
      }
    },
  };
}
