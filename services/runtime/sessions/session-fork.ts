import type { SessionLog } from '../../../src/bus/session-log.ts';
import { lastWholePoint, readSessionHistory } from '../../../src/bus/session-lineage.ts';
import { AgentbusError, ErrorCode, InvalidInputError, LogConflictError, SessionDeletedError } from '../../../src/errors.ts';
import type { Logger } from '../../../src/logging.ts';
import { LogEventType } from '../../../src/protocol/index.ts';
import type { EnvelopeFactory, ForkRequest } from '../../../src/protocol/index.ts';
import type { RuntimeTombstones } from './tombstones.ts';

/** What a fork made: the new session, and the sequence its inherited history ends at. */
export interface ForkOutcome {
  readonly sessionId: string;
  readonly atSeq: number;
}

/** Forks sessions: a new session whose history is another's up to a point, by reference. */
export interface SessionForker {
  /**
   * Forks `sessionId` at `request.atSeq` (default: the end of its history) into `request.sessionId` (default: a
   * fresh id). `atSeq` must be the sequence of an event of the source's history (its inherited part included); the
   * fork is cut back to the last whole point at or before it (see `lastWholePoint`), and the reply says where.
   * Writes the new session's `session.created` and `session.forked`, expecting its log empty. Refuses a deleted
   * source (`session_deleted`), a source with nothing logged (`not_found`), and a target id in use or deleted
   * (`conflict`).
   */
  fork(tenant: string, sessionId: string, request: ForkRequest): Promise<ForkOutcome>;
}

/** What the forker needs of the runtime. */
export interface SessionForkerDeps {
  readonly log: Pick<SessionLog, 'read' | 'lastSeq' | 'append'>;
  readonly tombstones: Pick<RuntimeTombstones, 'isDeleted'>;
  readonly envelopes: EnvelopeFactory;
  readonly newId: () => string;
  readonly nodeId: string;
  readonly logger: Logger;
}

/**
 * Creates the forker. Nothing is copied: the fork's log starts with `session.created` and `session.forked`
 * (`{ parentSessionId, parentSeq }`), and whoever reads its history reads the parent chain (`readSessionHistory`).
 * The source is only read, so a fork does not wait for the source's running turn: that turn is simply not part
 * of the fork (it is past the last whole point).
 */
export function createSessionForker(deps: SessionForkerDeps): SessionForker {
  return {
    async fork(tenant, sessionId, request) {
      if (await deps.tombstones.isDeleted(tenant, sessionId)) throw new SessionDeletedError(`session ${tenant}/${sessionId} was deleted: it cannot be forked`, { tenant, sessionId });
      const history = await readSessionHistory(deps.log, tenant, sessionId, { signal: AbortSignal.timeout(30_000) });
      if (history.lastSeq === 0) throw new AgentbusError(ErrorCode.notFound, `session ${tenant}/${sessionId} does not exist`);
      const { events } = history;
      const first = events[0]?.seq ?? 0;
      const end = events.at(-1)?.seq ?? 0;
      if (request.atSeq !== undefined && !events.some((event) => event.seq === request.atSeq)) {
        throw new InvalidInputError(`atSeq ${request.atSeq} is not the sequence of an event of session ${tenant}/${sessionId} (its history's events run from seq ${first} to ${end})`);
      }
      const atSeq = lastWholePoint(events, request.atSeq ?? end);
      if (atSeq === undefined) throw new InvalidInputError(`session ${tenant}/${sessionId} has no whole point to fork at, at or before seq ${request.atSeq ?? end}`);
      const forkId = request.sessionId ?? deps.newId();
      if (forkId === sessionId) throw new InvalidInputError(`a fork needs a session id of its own, not ${sessionId}`);
      const [deleted, taken] = await Promise.all([deps.tombstones.isDeleted(tenant, forkId), deps.log.lastSeq(tenant, forkId)]);
      if (deleted || taken > 0) {
        throw new AgentbusError(ErrorCode.conflict, `session ${tenant}/${forkId} ${deleted ? 'was deleted: its id cannot be used again' : 'exists already'}`);
      }
      const where = { tenant, sessionId: forkId };
      const created = deps.envelopes.create(LogEventType.sessionCreated, where, { createdBy: deps.nodeId });
      const forked = deps.envelopes.create(LogEventType.sessionForked, where, { parentSessionId: sessionId, parentSeq: atSeq, forkedBy: deps.nodeId });
      try {
        // Expecting the new log empty: of two forks (or a prompt) racing for the same id, one wins. One after the
        // other (not a pipelined group), so a refused first append writes nothing into the winner's log.
        const createdSeq = await deps.log.append(created, 0);
        await deps.log.append(forked, createdSeq);
      } catch (error) {
        if (error instanceof LogConflictError) throw new AgentbusError(ErrorCode.conflict, `session ${tenant}/${forkId} exists already`, { cause: error });
        throw error;
      }
      deps.logger.info({ tenant, sessionId, forkId, atSeq, requestedSeq: request.atSeq }, 'session forked');
      return { sessionId: forkId, atSeq };
    },
  };
}
