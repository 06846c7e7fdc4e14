import type { ResourceLimits } from 'node:worker_threads';
import type { Msg, NatsConnection, Subscription } from '@nats-io/nats-core';
import { z } from 'zod';
import { createReplyGuard, replyPolicyOf } from '../../src/bus/reply-guard.ts';
import type { ReplyPolicy } from '../../src/bus/reply-guard.ts';
import { serveEndpoint } from '../../src/bus/serve-endpoint.ts';
import { createServiceRegistration } from '../../src/bus/service-registry.ts';
import type { ServiceRegistration } from '../../src/bus/service-registry.ts';
import { InvalidInputError, TimeoutError } from '../../src/errors.ts';
import type { Logger } from '../../src/logging.ts';
import {
  DEFAULT_PREFIX,
  EMBED_TIMEOUT_HEADER as CALLER_WAIT_HEADER,
  createCodec,
  createHistorySubjects,
  createMemorySubjects,
  createStateSubjects,
  createSubjects,
  memorySearchRequestSchema,
  stateKeySchema,
  stateSaveSchema,
  sessionHistoryRequestSchema,
  sessionsListRequestSchema,
  streamNames,
} from '../../src/protocol/index.ts';
import type { MemoryRebuildReply, MemorySearchReply, MemorySearchRequest } from '../../src/protocol/index.ts';
import { createRefusalLog } from '../../src/refusal-log.ts';
import { GenAiOperation } from '../../src/telemetry/index.ts';
import { createToolWorker, defineTool } from '../../src/tool-sdk/index.ts';
import type { ToolWorker } from '../../src/tool-sdk/index.ts';
import { startGeneration } from './index-generation.ts';
import type { IndexGeneration } from './index-generation.ts';
import { createSessionHistory } from './session-history.ts';
import { openStateStore } from './state-store.ts';
import type { StateLimits } from './state-store.ts';
import { DEFAULT_MEMORY_TENANT_RATE, createMemoryRateLimit } from './rate-limit.ts';
import type { Rate } from '../../src/rate-limit.ts';
import { scheduleSnapshots } from './snapshot-schedule.ts';
import type { SnapshotSchedule } from './snapshot-schedule.ts';
import { createSnapshotStore } from './snapshots.ts';
import { streamOnceThere } from './stream-once-there.ts';
import type { MemorySnapshot } from './tenant-memory.ts';
import { VECTOR_SEARCH_WAIT_MS } from './memory-index.ts';
import { watchTombstones } from './tombstones.ts';
import type { TombstoneWatch } from './tombstones.ts';
import type { Embedder, VectorStatus } from './vectorizer.ts';
import { createQueryEmbedGate } from './query-embed-gate.ts';

/** The `$SRV` name of the memory service's queries; its `memory_search` tool is in `agentbus-memory-tools`. */
export const MEMORY_SERVICE_NAME = 'agentbus-memory';
export const MEMORY_SERVICE_VERSION = '0.1.0';

/** Options of {@link startMemoryService}. */
export interface MemoryServiceOptions {
  readonly nc: NatsConnection;
  readonly logger: Logger;
  /** Subject prefix; default `agentbus`. */
  readonly prefix?: string;
  /** Health figures for the `data` of the service's `$SRV.STATS` answer. */
  readonly statsData?: () => Record<string, unknown>;
  /** Embeds chunks and queries for hybrid search; without one, search is full-text only and says so. */
  readonly embedder?: Embedder;
  /** Why there is no embedder, said in every full-text answer; default 'no embedding provider configured'. */
  readonly fullTextReason?: string;
  /** Longest wait for a query's embedding before searching full-text only; default 200 ms, cut to the caller's own wait. */
  readonly queryEmbedTimeoutMs?: number;
  /** Index snapshots in the object store (default on): events that call for one, and the longest wait. */
  readonly snapshots?: false | { readonly everyEvents?: number; readonly intervalMs?: number };
  /** Copies of the state bucket and the snapshot store in a NATS cluster; default 1. */
  readonly replicas?: number;
  /** Which reply subjects it answers (queries, state, rebuild, its tool, `$SRV`): `replyPolicyFromBus` in `main.ts`; default read from `nc`. */
  readonly replyPolicy?: ReplyPolicy;
  /** Limits of agent state; those not given as in `DEFAULT_STATE_LIMITS`. */
  readonly stateLimits?: Partial<StateLimits>;
  /** Requests per second of one tenant (a `perSecond` of 0: no limit); default `DEFAULT_MEMORY_TENANT_RATE`. */
  readonly tenantRate?: Rate;
  /** Heap limits of the vector thread; default Node's. Past them the thread ends and search is full-text. */
  readonly vectorThreadLimits?: ResourceLimits;
}

/** A running memory service. */
export interface MemoryService {
  /** Resolves once everything that was in the log at start is indexed. */
  readonly caughtUp: Promise<void>;
  /** The `$SRV` instance id of its queries. */
  readonly id: string;
  /** Chunks indexed, over all tenants. */
  size(): number;
  /** The last log sequence indexed. */
  lastSeq(): number;
  /** Whether search can rank by vectors, and if not why. */
  vectors(): VectorStatus;
  /** Resolves once every indexed chunk that can have a vector has one. */
  vectorsIdle(): Promise<void>;
  /** Writes a snapshot now when anything changed since the last one. */
  snapshot(): Promise<void>;
  /** Log events read at start (0 when a snapshot covered the whole log). */
  readAtStart(): number;
  stop(): Promise<void>;
}

/**
 * Starts the memory service on an open connection: it follows the session log from its start into a
 * per-tenant index and session catalog, and answers `agentbus.<t>.memory.search`,
 * `agentbus.<t>.sessions.list` and `agentbus.<t>.sessions.<sid>.history` (queue group `agentbus.memory`, so
 * instances share queries) and the `memory_search` tool. The tenant is always the subject's (or the tool
 * call's) own. Deleted sessions (the tombstones bucket) are forgotten and not indexed again.
 */
export async function startMemoryService(options: MemoryServiceOptions): Promise<MemoryService> {
  const { nc } = options;
  const prefix = options.prefix ?? DEFAULT_PREFIX;
  const logger = options.logger.child({ service: 'memory' });
  const codec = createCodec();
  const subjects = createSubjects(prefix);
  const memorySubjects = createMemorySubjects(prefix);
  const refusals = createRefusalLog({ logger, what: 'memory request refused' });
  const replyPolicy = options.replyPolicy ?? replyPolicyOf(nc);
  const replies = createReplyGuard({ policy: replyPolicy, refusals });
  const stream = streamNames(prefix).log;
  const stopping = new AbortController();

  // Deleted sessions: forgotten when their tombstone comes, and never indexed again (see docs/memory.md, sessions as data).
  // The watch is ready (every tombstone so far read) before any index is loaded or fed.
  const indexes = new Set<IndexGeneration>();
  const tombstones: TombstoneWatch = await watchTombstones({
    nc,
    prefix,
    logger,
    onTombstone: async (tenant, sessionId) => {
      for (const index of indexes) await index.forget(tenant, sessionId);
    },
  });
  await tombstones.ready;
  const history = createSessionHistory({ nc, codec, subjects, stream, logger, tombstones });
  const state = await openStateStore({ nc, codec, logger, bucket: streamNames(prefix).state, replicas: options.replicas ?? 1, ...(options.stateLimits ? { limits: options.stateLimits } : {}) });
  const rateLimit = createMemoryRateLimit(options.tenantRate ?? DEFAULT_MEMORY_TENANT_RATE, () => Date.now());
  const stateSubjects = createStateSubjects(prefix);
  const historySubjects = createHistorySubjects(prefix);

  const snapshotStore = options.snapshots === false ? undefined : createSnapshotStore({ nc, logger, bucket: streamNames(prefix).memory, replicas: options.replicas ?? 1 });
  const log = await streamOnceThere(nc, stream, { logger, what: 'the session log stream', signal: stopping.signal });
  const loaded = await snapshotStore?.load();
  const saved = usableSnapshot(loaded, log.lastSeq, log.created, logger);
  // A snapshot of another log would block every later one (it claims a later sequence): it goes.
  if (loaded && !saved) await snapshotStore?.remove();
  let snapshots: SnapshotSchedule | undefined;
  const begin = async (snapshot: MemorySnapshot | undefined) => {
    const started = await startGeneration({ nc, codec, subjects, stream, logger, embedder: options.embedder, ...(options.fullTextReason ? { fullTextReason: options.fullTextReason } : {}), logCreated: log.created, ...(snapshot ? { snapshot } : {}), isDeleted: (tenant, sessionId) => tombstones.has(tenant, sessionId), onIndexed: () => snapshots?.noteIndexed(), onEmbedded: () => snapshots?.noteIndexed(), signal: stopping.signal, ...(options.vectorThreadLimits ? { vectorThreadLimits: options.vectorThreadLimits } : {}) });
    indexes.add(started);
    return started;
  };
  const followStarted = performance.now();
  let generation: IndexGeneration = await begin(saved);
  let caughtUp = false;
  // How fast the log read at start was indexed (events and ms from following to caught up), for operators and the bench.
  let catchUp: { events: number; ms: number } | undefined;
  void generation.caughtUp.then(() => {
    caughtUp = true;
    catchUp = { events: generation.indexed(), ms: Math.round(performance.now() - followStarted) };
    logger.info({ entries: generation.store.size(), lastSeq: generation.lastSeq(), fromSnapshot: saved?.seq ?? 0, read: catchUp.events, ms: catchUp.ms }, 'memory caught up with the log');
  });
  if (snapshotStore) {
    snapshots = scheduleSnapshots({
      store: snapshotStore,
      logger,
      take: () => (caughtUp ? generation.snapshot() : undefined),
      ...(options.snapshots ? options.snapshots : {}),
    });
  }
  const startedWith = generation;

  // The query's embedding is waited for up to the configured time, and never past the caller's own wait (less a
  // margin for the search and the way back): full-text hits in time beat hybrid ones too late. Which searches wait
  // at all follows how the embedder answered lately (query-embed-gate.ts): waiting for what comes too late only
  // makes every answer later.
  const embedGate = createQueryEmbedGate();
  const searchOf = async (tenant: string, request: MemorySearchRequest, callerWaitsMs?: number): Promise<MemorySearchReply> => {
    const received = performance.now();
    const { store, vectorizer } = generation;
    const status = vectorizer.status();
    // Full-text hits first, at once (top k, a millisecond or so): what the answer is when the query's embedding is late.
    const fullText = await store.search(tenant, request);
    let queryVector: Float32Array | undefined;
    const waiting = store.hasVectors(tenant) ? embedGate.admit(received, queryEmbedWait(options.queryEmbedTimeoutMs ?? DEFAULT_QUERY_EMBED_TIMEOUT_MS, callerWaitsMs)) : undefined;
    if (waiting) {
      try {
        queryVector = await vectorizer.embedQuery(request.query, waiting.waitMs);
      } finally {
        waiting.done(performance.now(), queryVector !== undefined);
      }
    }
    // The caller gave up meanwhile (an overloaded instance): its search is not worth the time the next caller needs.
    if (callerWaitsMs !== undefined && performance.now() - received >= callerWaitsMs) throw new TimeoutError(`search past the caller's wait of ${callerWaitsMs} ms`, callerWaitsMs);
    // The vector side (its own thread) is waited for up to what is left of the caller's wait: else the full-text hits.
    const vectorWaitMs = callerWaitsMs === undefined ? VECTOR_SEARCH_WAIT_MS : callerWaitsMs - callerMargin(callerWaitsMs) - (performance.now() - received);
    const { hits, hybrid } = queryVector && vectorWaitMs > 0 ? await store.search(tenant, request, queryVector, vectorWaitMs) : fullText;
    if (hybrid) return { hits, mode: 'hybrid' };
    const vectorFailure = store.vectorFailure();
    const note =
      status.state === 'off'
        ? `full-text only: ${status.reason}`
        : vectorFailure
          ? `full-text only: ${vectorFailure}`
          : queryVector
            ? 'full-text only: the vector search did not answer in time'
            : !store.hasVectors(tenant)
          ? 'full-text only: nothing of this tenant is embedded yet'
            : 'full-text only: the query could not be embedded in time';
    return { hits, mode: 'full-text', note };
  };

  let rebuilding: Promise<MemoryRebuildReply> | undefined;
  const rebuild = (): Promise<MemoryRebuildReply> =>
    (rebuilding ??= (async () => {
      const started = performance.now();
      logger.info('rebuilding the memory index from the log');
      const next = await begin(undefined);
      await next.caughtUp;
      const previous = generation;
      generation = next;
      previous.stop();
      indexes.delete(previous);
      await snapshotStore?.remove();
      await snapshots?.flush({ force: true });
      const reply = { instance: registration.id, entries: next.store.size(), lastSeq: next.lastSeq(), ms: Math.round(performance.now() - started) };
      logger.info(reply, 'memory index rebuilt from the log');
      return reply;
    })().finally(() => {
      rebuilding = undefined;
    }));

  const registration: ServiceRegistration = createServiceRegistration(
    nc,
    {
      name: MEMORY_SERVICE_NAME,
      version: MEMORY_SERVICE_VERSION,
      description: 'agentbus memory: search and sessions, per tenant, from the session log',
      metadata: { prefix, mode: options.embedder ? 'hybrid' : 'full-text' },
      endpoints: [
        { name: 'search', subject: memorySubjects.anySearch(), queueGroup: memorySubjects.queue },
        { name: 'sessions-list', subject: memorySubjects.anySessionsList(), queueGroup: memorySubjects.queue },
        { name: 'sessions-history', subject: historySubjects.anyHistory(), queueGroup: memorySubjects.queue },
        { name: 'rebuild', subject: memorySubjects.rebuild() },
        { name: 'state-save', subject: stateSubjects.any('save'), queueGroup: memorySubjects.queue },
        { name: 'state-load', subject: stateSubjects.any('load'), queueGroup: memorySubjects.queue },
        { name: 'state-delete', subject: stateSubjects.any('delete'), queueGroup: memorySubjects.queue },
      ],
    },
    {
      logger,
      statsData: () => ({
        ...options.statsData?.(),
        entries: generation.store.size(),
        vectors: generation.store.vectorCount(),
        pendingVectors: generation.vectorizer.pending(),
        // Embedded, handed to the vector thread, not yet in its graph (searchable by full text meanwhile).
        queuedVectors: generation.store.vectorsQueued(),
        ...(generation.store.vectorFailure() ? { vectorFailure: generation.store.vectorFailure() } : {}),
        vectorStatus: generation.vectorizer.status(),
        lastSeq: generation.lastSeq(),
        indexed: generation.indexed(),
        ...(catchUp ? { catchUp } : {}),
        snapshots: snapshots?.written() ?? 0,
      }),
      replyPolicy,
    },
  );

  // Every endpoint's request is a tenant's: its subject names the tenant, never its body. Checked, and rate
  // limited per tenant, before the body is decoded.
  const tenantOf = (subject: string) => memorySubjects.tenantOf(subject);
  const tenantOfRequest = (message: Msg): string => {
    const tenant = tenantOf(message.subject);
    if (!tenant) throw new InvalidInputError(`bad subject ${message.subject}: the tenant must match [A-Za-z0-9_-]{1,64}`);
    return tenant;
  };
  const host = { nc, codec, logger, replies, refusals, stats: registration };
  const endpoint = { ...host, queue: memorySubjects.queue, tenantOf, admit: (message: Msg) => rateLimit.admit(tenantOfRequest(message)) };
  const subscriptions: Subscription[] = [
    serveEndpoint({
      ...endpoint,
      name: 'search',
      subject: memorySubjects.anySearch(),
      schema: memorySearchRequestSchema,
      spanName: GenAiOperation.searchMemory,
      handle: (request, message): Promise<MemorySearchReply> => searchOf(tenantOfRequest(message), request, callerWaitOf(message)),
    }),
    serveEndpoint({
      ...endpoint,
      name: 'sessions-list',
      subject: memorySubjects.anySessionsList(),
      schema: sessionsListRequestSchema,
      what: 'sessions list request',
      emptyBody: {},
      handle: (request, message) => generation.store.listSessions(tenantOfRequest(message), request),
    }),
    serveEndpoint({
      ...endpoint,
      name: 'sessions-history',
      subject: historySubjects.anyHistory(),
      schema: sessionHistoryRequestSchema,
      what: 'session history request',
      emptyBody: {},
      admit: (message) => {
        endpoint.admit(message);
        if (!historySubjects.parse(message.subject)) throw new InvalidInputError(`bad subject ${message.subject}: tenant and session id must match [A-Za-z0-9_-]{1,64}`);
      },
      handle: ({ fromLastTurn, ...request }, message) => {
        const session = historySubjects.parse(message.subject)!;
        // From the session's newest turn start memory has indexed; the page starts just before it.
        const started = fromLastTurn ? generation.store.lastTurnStart(session.tenant, session.sessionId) : undefined;
        return history.page(session.tenant, session.sessionId, started === undefined ? request : { ...request, afterSeq: started - 1 });
      },
    }),
    // Per-tenant agent state: the tenant is the subject's, never the body's.
    serveEndpoint({ ...endpoint, name: 'state-save', subject: stateSubjects.any('save'), schema: stateSaveSchema, what: 'state save request', emptyBody: {}, handle: (request, message) => state.save(tenantOfRequest(message), request) }),
    serveEndpoint({ ...endpoint, name: 'state-load', subject: stateSubjects.any('load'), schema: stateKeySchema, what: 'state load request', emptyBody: {}, handle: (request, message) => state.load(tenantOfRequest(message), request.key) }),
    serveEndpoint({ ...endpoint, name: 'state-delete', subject: stateSubjects.any('delete'), schema: stateKeySchema, what: 'state delete request', emptyBody: {}, handle: (request, message) => state.delete(tenantOfRequest(message), request.key) }),
    // Every instance rebuilds (no queue group, no tenant) and answers once its new index has caught up.
    serveEndpoint({
      ...host,
      name: 'rebuild',
      subject: memorySubjects.rebuild(),
      schema: z.unknown(),
      handle: () => rebuild(),
      failureMessage: 'memory rebuild failed; the previous index keeps serving',
    }),
  ];

  const memorySearch = defineTool({
    name: 'memory_search',
    description: 'Search what was said and found in earlier sessions of this tenant (messages, answers, tool results, summaries). Returns the best-matching snippets.',
    parameters: z.object({ query: z.string().min(1).max(1_000).describe('what to look for'), k: z.int().min(1).max(20).optional().describe('how many snippets, default 5') }),
    tier: 'read_only',
    timeoutMs: 5_000,
    idempotent: true,
    execute: async ({ query, k }, context) => {
      // How it ranked (the reply's mode and note) is for operators, not the model.
      const { hits } = await searchOf(context.tenant, { query, k: k ?? 5 });
      if (hits.length === 0) return 'Nothing in memory matches.';
      return hits.map((hit) => `[session ${hit.sessionId}, ${hit.type}] ${hit.text}`).join('\n\n');
    },
  });
  const tools: ToolWorker = createToolWorker({ nc, subjects, codec, logger, tools: [memorySearch], serviceName: `${MEMORY_SERVICE_NAME}-tools`, version: MEMORY_SERVICE_VERSION, description: 'agentbus memory tools', replyPolicy });
  await tools.start();
  await nc.flush();
  logger.info({ prefix }, 'memory service started');

  return {
    caughtUp: startedWith.caughtUp,
    id: registration.id,
    size: () => generation.store.size(),
    lastSeq: () => generation.lastSeq(),
    vectors: () => generation.vectorizer.status(),
    vectorsIdle: () => generation.vectorizer.idle(),
    snapshot: async () => {
      await generation.caughtUp;
      await snapshots?.flush();
    },
    readAtStart: () => startedWith.indexed(),
    async stop() {
      await tools.stop();
      await registration.stop();
      for (const subscription of subscriptions) if (!subscription.isClosed()) subscription.unsubscribe();
      // What was indexed since the last snapshot is kept for the next start (bounded: stopping must not hang).
      if (caughtUp) await Promise.race([snapshots?.flush(), new Promise((resolve) => setTimeout(resolve, 5_000).unref())]);
      snapshots?.stop();
      stopping.abort();
      generation.stop();
      tombstones.stop();
      state.stop();
      refusals.close();
    },
  };
}

/** Default longest wait for a query's embedding (`AGENTBUS_MEMORY_QUERY_EMBED_TIMEOUT_MS`). */
export const DEFAULT_QUERY_EMBED_TIMEOUT_MS = 200;

/**
 * How long a search waits for its query's embedding: the configured wait, cut to the caller's own wait (the
 * request's `Agentbus-Timeout-Ms` header) less a margin of a fifth of it, at least 30 ms, for the search itself,
 * a loaded event loop and the way back. 0: no time to embed, full text only.
 */
export function queryEmbedWait(configuredMs: number, callerWaitsMs: number | undefined): number {
  if (callerWaitsMs === undefined) return configuredMs;
  return Math.max(0, Math.min(configuredMs, callerWaitsMs - callerMargin(callerWaitsMs)));
}

/** What a search keeps of its caller's wait for itself and the way back: a fifth, at least 30 ms. */
function callerMargin(callerWaitsMs: number): number {
  return Math.max(30, Math.ceil(callerWaitsMs / 5));
}

/** The caller's wait in ms from a request's `Agentbus-Timeout-Ms` header, when it sends a valid one. */
function callerWaitOf(message: Msg): number | undefined {
  const value = Number(message.headers?.get(CALLER_WAIT_HEADER));
  return Number.isSafeInteger(value) && value > 0 ? value : undefined;
}

/** A loaded snapshot when it belongs to this log and does not claim more of it than there is; else undefined. */
function usableSnapshot(snapshot: MemorySnapshot | undefined, lastSeq: number, created: string, logger: Logger): MemorySnapshot | undefined {
  if (!snapshot) return undefined;
  if (snapshot.logCreated !== created || snapshot.seq > lastSeq) {
    logger.warn({ snapshotSeq: snapshot.seq, lastSeq, snapshotLog: snapshot.logCreated, log: created }, 'the memory snapshot is of another session log; reading the log from its start');
    return undefined;
  }
  return snapshot;
}

export { createMemoryStore } from './tenant-memory.ts';
export { DEFAULT_STATE_LIMITS } from './state-store.ts';
export type { StateLimits } from './state-store.ts';
export { DEFAULT_MEMORY_TENANT_RATE } from './rate-limit.ts';
export type { MemorySnapshot, MemoryStore } from './tenant-memory.ts';
