import { z } from 'zod';
import { InvalidInputError } from '../errors.ts';
import type { ErrorData } from '../errors.ts';
import type { LogEvent } from './events.ts';
import { TOKEN_PATTERN, isToken } from './subjects.ts';

/** The most events one history page holds. */
export const MAX_HISTORY_LIMIT = 500;
/** Events per history page when the request does not say. */
export const DEFAULT_HISTORY_LIMIT = 100;

/** `agentbus.<t>.sessions.<sid>.history`: `{ limit?, afterSeq?, fromLastTurn? }`. Unknown fields are refused. */
export const sessionHistoryRequestSchema = z
  .strictObject({
    limit: z.int().min(1).max(MAX_HISTORY_LIMIT).optional(),
    /** The stream sequence of the last event already read; the page starts after it. */
    afterSeq: z.int().min(0).optional(),
    /**
     * Start at the session's own newest `turn.started` memory has indexed (from the start when it has none): memory may
     * lag the log, so page on to the end for a later turn. Not with `afterSeq`.
     */
    fromLastTurn: z.boolean().optional(),
  })
  .refine((request) => !(request.fromLastTurn && request.afterSeq !== undefined), { message: 'fromLastTurn and afterSeq do not go together: page on with afterSeq' });
export type SessionHistoryRequest = z.infer<typeof sessionHistoryRequestSchema>;

/**
 * A page of a session's log, oldest first, each event with its `seq`. `nextAfterSeq` is there when the log
 * holds more: pass it as `afterSeq` for the next page.
 */
export interface SessionHistoryReply {
  readonly events: readonly LogEvent[];
  readonly nextAfterSeq?: number;
}

/**
 * The body of `agentbus.<t>.sessions.<sid>.fork`: `atSeq`, the stream sequence of the source's history to fork at
 * (default: its end); `sessionId`, the new session's id (default: a fresh one). Empty, or `{}`, forks at the end.
 */
export const forkSessionSchema = z.strictObject({
  atSeq: z.int().min(1).optional(),
  sessionId: z.string().regex(TOKEN_PATTERN, `sessionId must match ${TOKEN_PATTERN.source}`).optional(),
});
export type ForkRequest = z.infer<typeof forkSessionSchema>;

/**
 * The reply to a fork: the new session, and the sequence its inherited history ends at (`atSeq`, or the last whole
 * point before it: see docs/protocol.md, *Fork*).
 */
export type ForkReply = { readonly ok: true; readonly sessionId: string; readonly atSeq: number } | { readonly ok: false; readonly error: ErrorData };

/** The body of `agentbus.<t>.sessions.<sid>.delete`: empty, or `{}`. */
export const deleteSessionSchema = z.strictObject({});

/** The reply to a delete: how many log messages were purged; `alreadyDeleted` when an earlier delete had done it. */
export type DeleteReply = { readonly ok: true; readonly purged: number; readonly alreadyDeleted?: boolean } | { readonly ok: false; readonly error: ErrorData };

/**
 * A deleted session's tombstone, the value under `<tenant>.<sessionId>` in the `AGENTBUS_TOMBSTONES` key-value
 * bucket. Its presence is what counts: the runtime refuses the id from then on, memory forgets the session.
 */
export const tombstoneSchema = z.object({
  /** Epoch ms. */
  deletedAt: z.number(),
  /** The runtime node that deleted it. */
  node: z.string(),
});
export type Tombstone = z.infer<typeof tombstoneSchema>;

/** The tombstone key of a session. */
export function tombstoneKey(tenant: string, sessionId: string): string {
  if (!isToken(tenant) || !isToken(sessionId)) throw new InvalidInputError(`tenant and session id must match ${TOKEN_PATTERN.source}`);
  return `${tenant}.${sessionId}`;
}

/** The session a tombstone key names, or undefined when it is not one. */
export function parseTombstoneKey(key: string): { tenant: string; sessionId: string } | undefined {
  const [tenant, sessionId, ...rest] = key.split('.');
  return rest.length === 0 && isToken(tenant) && isToken(sessionId) ? { tenant, sessionId } : undefined;
}

/** The subject of a session's history request, which memory serves (queue group `<prefix>.memory`). */
export interface HistorySubjects {
  history(tenant: string, sessionId: string): string;
  anyHistory(): string;
  /** The tenant and session of a history subject, or undefined when it is not a valid one. */
  parse(subject: string): { tenant: string; sessionId: string } | undefined;
}

/** History subjects under `prefix` (default `agentbus`). */
export function createHistorySubjects(prefix = 'agentbus'): HistorySubjects {
  const depth = prefix.split('.').length;
  return {
    history(tenant, sessionId) {
      if (!isToken(tenant) || !isToken(sessionId)) throw new InvalidInputError(`tenant and session id must match ${TOKEN_PATTERN.source}`);
      return `${prefix}.${tenant}.sessions.${sessionId}.history`;
    },
    anyHistory: () => `${prefix}.*.sessions.*.history`,
    parse(subject) {
      const tokens = subject.split('.');
      const tenant = tokens[depth];
      const sessionId = tokens[depth + 2];
      if (tokens.length !== depth + 4 || tokens[depth + 1] !== 'sessions' || tokens[depth + 3] !== 'history') return undefined;
      return isToken(tenant) && isToken(sessionId) ? { tenant, sessionId } : undefined;
    },
  };
}
