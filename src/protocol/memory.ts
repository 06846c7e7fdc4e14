import { z } from 'zod';
import { InvalidInputError } from '../errors.ts';
import { LogEventType } from './events.ts';
import { TOKEN_PATTERN, isToken } from './subjects.ts';

/** The log event types memory indexes, and a search may filter by. */
export const MemoryEventType = {
  userMessage: LogEventType.userMessage,
  assistantMessage: LogEventType.assistantMessage,
  toolResult: LogEventType.toolResult,
  summaryCreated: LogEventType.summaryCreated,
} as const;
export type MemoryEventType = (typeof MemoryEventType)[keyof typeof MemoryEventType];

/** `agentbus.<t>.memory.search`: `{ query, k?, sessionId?, types? }`. Unknown fields are refused. */
export const memorySearchRequestSchema = z
  .object({
    query: z.string().min(1).max(4_096),
    k: z.int().min(1).max(50).optional(),
    sessionId: z.string().regex(TOKEN_PATTERN).optional(),
    types: z.array(z.enum([MemoryEventType.userMessage, MemoryEventType.assistantMessage, MemoryEventType.toolResult, MemoryEventType.summaryCreated])).min(1).max(4).optional(),
  })
  .strict();
export type MemorySearchRequest = z.infer<typeof memorySearchRequestSchema>;

/** One snippet memory found: where it was logged, its text, and its rank score (higher is better). */
export interface MemoryHit {
  readonly sessionId: string;
  readonly seq: number;
  readonly type: MemoryEventType;
  readonly text: string;
  readonly score: number;
  readonly ts: number;
}

/**
 * The answer to a search. `mode` says how it ranked: `hybrid` (BM25 and vector similarity fused by reciprocal
 * rank) or `full-text` (BM25 alone), and then `note` says why vectors took no part.
 */
export interface MemorySearchReply {
  readonly hits: readonly MemoryHit[];
  readonly mode: 'full-text' | 'hybrid';
  readonly note?: string;
}

/** What each memory instance answers on `agentbus.memory.rebuild`, once its new index has caught up. */
export interface MemoryRebuildReply {
  readonly instance: string;
  /** Chunks in the new index. */
  readonly entries: number;
  /** The last log sequence it covers. */
  readonly lastSeq: number;
  readonly ms: number;
}

/** `agentbus.<t>.sessions.list`: `{ limit?, pageToken? }`. */
export const sessionsListRequestSchema = z
  .object({
    limit: z.int().min(1).max(500).optional(),
    pageToken: z.string().min(1).max(512).optional(),
  })
  .strict();
export type SessionsListRequest = z.infer<typeof sessionsListRequestSchema>;

/** One session as memory knows it from the log. */
export interface SessionSummary {
  readonly sessionId: string;
  /** Epoch ms of its first event. */
  readonly createdAt: number;
  readonly lastActivityAt: number;
  /** Turns ended. */
  readonly turns: number;
  /** USD, summed over its turns. */
  readonly cost: number;
  /**
   * The log sequence of its newest event memory has read: it changes whenever the session does, so a reader may keep
   * what it derived from the session's history until it moves (memory answers after it indexes, so it may lag the log).
   */
  readonly lastSeq?: number;
  /** The last answer's text, cut to 200 characters. */
  readonly lastText?: string;
  /** A fork's parent session and the sequence of the parent's history it inherits through (`session.forked`). */
  readonly forkedFrom?: { readonly sessionId: string; readonly seq: number };
}

/** A page of sessions, oldest first; `nextPageToken` when there are more. */
export interface SessionsListReply {
  readonly sessions: readonly SessionSummary[];
  readonly nextPageToken?: string;
}

/** The subjects of the memory service, per tenant so that permissions can seal them. */
export interface MemorySubjects {
  search(tenant: string): string;
  sessionsList(tenant: string): string;
  anySearch(): string;
  anySessionsList(): string;
  /** `agentbus.memory.rebuild`: every instance (no queue group) rebuilds its index from the log. */
  rebuild(): string;
  /** The queue group every memory instance serves its queries in. */
  readonly queue: string;
  /** The tenant token of a memory subject, or undefined when it is not a valid one. */
  tenantOf(subject: string): string | undefined;
}

/** Memory subjects under `prefix` (default `agentbus`). */
export function createMemorySubjects(prefix = 'agentbus'): MemorySubjects {
  const depth = prefix.split('.').length;
  const tenantToken = (tenant: string) => {
    if (!isToken(tenant)) throw new InvalidInputError(`tenant must match ${TOKEN_PATTERN.source}, got ${JSON.stringify(tenant)}`);
    return tenant;
  };
  return {
    search: (tenant) => `${prefix}.${tenantToken(tenant)}.memory.search`,
    sessionsList: (tenant) => `${prefix}.${tenantToken(tenant)}.sessions.list`,
    anySearch: () => `${prefix}.*.memory.search`,
    anySessionsList: () => `${prefix}.*.sessions.list`,
    rebuild: () => `${prefix}.memory.rebuild`,
    queue: `${prefix}.memory`,
    tenantOf(subject) {
      const tenant = subject.split('.')[depth];
      return isToken(tenant) ? tenant : undefined;
    },
  };
}
