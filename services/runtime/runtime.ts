import { coalesceWrites } from '../../src/bus/coalesce-writes.ts';
import type { NatsConnection } from '@nats-io/nats-core';
import { jetstream, jetstreamManager } from '@nats-io/jetstream';
import { Kvm } from '@nats-io/kv';
import { createReplyGuard, replyPolicyOf } from '../../src/bus/reply-guard.ts';
import type { ReplyPolicy } from '../../src/bus/reply-guard.ts';
import { createSessionLog } from '../../src/bus/session-log.ts';
import { ensureStreams } from '../../src/bus/streams.ts';
import { LogConflictError, SessionDeletedError } from '../../src/errors.ts';
import type { Logger } from '../../src/logging.ts';
import { createEnvelopeFactory, createSubjects, streamNames } from '../../src/protocol/index.ts';
import type { Codec, SessionVerb, ToolSpec } from '../../src/protocol/index.ts';
import { createRefusalLog } from '../../src/refusal-log.ts';
import type { Scrubber } from '../../src/scrub/index.ts';
import type { TokenCounter } from '../../src/tokens.ts';
import { IngressMode, checkCeilings } from './config.ts';
import type { RuntimeConfig } from './config.ts';
import type { MemoryPort } from './context/recall.ts';
import { createAdmission } from './ingress/admission.ts';
import { createForwarder, startIngress } from './ingress/ingress.ts';
import type { IngressCounts } from './ingress/ingress.ts';
import type { MessageOrigin, SessionMessage } from './ingress/forward.ts';
import { createParkedMessages } from './ingress/parked-messages.ts';
import { createSessionMessageHandler } from './ingress/session-messages.ts';
import { createOutputSchemaCompiler } from '../../src/output-schema.ts';
import { createSessionLeases } from './node/leases.ts';
import type { SessionLeases } from './node/leases.ts';
import { startNodeLiveness } from './node/node-liveness.ts';
import { sweepsOrphans } from './node/rendezvous.ts';
import type { ProviderPort, ToolPort } from './ports.ts';
import { createHostedSessions } from './sessions/hosted-sessions.ts';
import type { HostedSessions } from './sessions/hosted-sessions.ts';
import { createLivePublisher } from './sessions/live-publisher.ts';
import { createSessionDeleter } from './sessions/session-delete.ts';
import type { SessionDeleter } from './sessions/session-delete.ts';
import { openSession } from './sessions/session-host.ts';
import { createSessionForker } from './sessions/session-fork.ts';
import type { SessionHostDeps } from './sessions/session-host.ts';
import { createRuntimeTombstones } from './sessions/tombstones.ts';
import type { RuntimeTombstones } from './sessions/tombstones.ts';
import type { ToolHooks } from './tools/tool-hooks.ts';
import { createSessionLogic } from './turn/turn-actors.ts';
import { openFleetLimits } from './limits/open-limits.ts';
import { createAgentCaller } from './agents/agent-calls.ts';
import type { AgentProfiles } from './agents/profiles.ts';
import { limitProvider } from './limits/limited-provider.ts';

/** The runtime service of one node. */
export interface Runtime {
  /** Sessions hosted on this node now. */
  sessions(): number;
  /** The session messages this node heard from the queue group and passed on or was passed (partitioned ingress). */
  ingress(): IngressCounts;
  /** Stops taking messages, stops every session (the log keeps what is needed to resume elsewhere). */
  stop(): Promise<void>;
}

/** What the runtime is made of. */
export interface RuntimeDeps {
  readonly nc: NatsConnection;
  readonly codec: Codec;
  readonly logger: Logger;
  readonly config: RuntimeConfig;
  readonly provider: ProviderPort;
  readonly tools: ToolPort;
  /** The deployment's tool hooks (`createToolHooks`); without them calls go straight to the workers. */
  readonly hooks?: ToolHooks;
  /** Memory to recall from at a turn's first step; without it, turns recall nothing. */
  readonly memory?: MemoryPort;
  readonly tokens: TokenCounter;
  readonly scrubber: Scrubber;
  readonly newId: () => string;
  readonly now: () => number;
  /** Hears each message this node handled as the session's lease holder: how long it took, and its error. */
  readonly onHandled?: (verb: SessionVerb, outcome: { durationMs: number; error?: string }) => void;
  /** Which reply subjects the session verbs are answered on (`replyPolicyFromBus`); default read from `nc`. */
  readonly replyPolicy?: ReplyPolicy;
  /** Agent profiles: each tenant's sessions are offered theirs as `agent__<name>` and `handoff__<name>` tools. */
  readonly profiles?: AgentProfiles;
}

/**
 * Starts the runtime: ensures the streams and buckets, then serves `prompt`, `cancel`, `steer`, `approve` and
 * `delete` of every session. Each session is hosted by the node that holds its lease; a message reaches every
 * node (`broadcast` ingress) or one node of a queue group, which passes it on to the holder (`queue`; see
 * ingress/ingress.ts). A deleted session's id is refused (`session_deleted`) from then on. The wiring of
 * the runtime's rooms: the only place that opens its buckets, subscribes (through `startIngress`) and starts
 * its timers.
 */
export async function startRuntime(deps: RuntimeDeps): Promise<Runtime> {
  const { nc, codec, config } = deps;
  checkCeilings(config);
  const logger = deps.logger.child({ service: 'runtime', node: config.nodeId });
  // A node publishes from many sessions at once: one socket write per turn of the event loop, not per publish.
  if (!coalesceWrites(nc)) logger.warn('this nats.js does not let the runtime coalesce its socket writes; each publish is written on its own');
  const subjects = createSubjects(config.prefix);
  const jsm = await jetstreamManager(nc);
  const names = await ensureStreams(jsm, { prefix: config.prefix, logger, ...(config.replicas ? { replicas: config.replicas } : {}), ...(config.streamLimits ? { limits: config.streamLimits } : {}) });
  const log = createSessionLog({ nc, js: jetstream(nc), subjects, codec, stream: names.log, logger });
  const buckets = streamNames(config.prefix);
  // Buckets are made with these copies; nats.js does not change a bucket that exists.
  const replicas = config.replicas ?? 1;
  const kv = await new Kvm(nc).create(buckets.leases, { history: 1, replicas });
  // Heartbeats of the runtime nodes: a key no node rewrote for ten minutes (a node long gone) ages out.
  const nodesBucket = await new Kvm(nc).create(buckets.nodes, { history: 1, ttl: 10 * 60_000, replicas });
  const liveness = await startNodeLiveness({ kv: nodesBucket, codec, nodeId: config.nodeId, ttlMs: config.leaseTtlMs, logger });
  // A lease operation sent while the connection was down waits its whole timeout after the reconnect (nats.js
  // sends it, the restarted server may drop it): bound each by the TTL, so claims queued behind it wait no longer.
  const leases: SessionLeases = createSessionLeases({ kv, codec, liveness, logger, opTimeoutMs: Math.min(5_000, config.leaseTtlMs) });
  // Kept past the time it takes to find a node dead, with room for a holder that died while handling one.
  const parked = createParkedMessages({ keepMs: 2 * config.leaseTtlMs + 2_000, maxBytes: 64 * 1024 * 1024 });
  const tombstoneBucket = await new Kvm(nc).create(buckets.tombstones, { history: 1, replicas });
  // The tool workers' result ledger: made here, where every bucket is made, and only written and read by workers.
  await new Kvm(nc).create(buckets.ledger, {
    history: 1,
    ttl: config.ledgerTtlMs,
    replicas,
    description: 'agentbus: outcomes of side-effecting tool calls by effectId',
    ...(config.ledgerMaxBytes === undefined ? {} : { max_bytes: config.ledgerMaxBytes }),
  });
  // Fleet-wide limits, when configured: every provider call of every node counts in one bucket (see limits/).
  const limits = config.limits ? await openFleetLimits(nc, codec, buckets.limits, config, replicas, deps.now) : undefined;
  const provider = limits && config.limits ? limitProvider(deps.provider, { limits, maxWaitMs: config.limits.rateMaxWaitMs, now: deps.now, logger }) : deps.provider;
  const tombstones: RuntimeTombstones = createRuntimeTombstones({ kv: tombstoneBucket, codec, nodeId: config.nodeId, now: deps.now, direct: { nc, bucket: buckets.tombstones } });
  // A write refused by the lease guard never reached the log: there is no sequence to name.
  const transcriptSeqUnknown = -1;
  const envelopes = createEnvelopeFactory({ newId: deps.newId, now: deps.now });
  const toolTokenCache = new Map<string, number>();
  const admission = createAdmission(config.admission, deps.now);
  const refusals = createRefusalLog({ logger });
  const replies = createReplyGuard({ policy: deps.replyPolicy ?? replyPolicyOf(nc), refusals });
  const hostDeps: SessionHostDeps = {
    logic: createSessionLogic(),
    log,
    envelopes,
    live: createLivePublisher({ nc, subjects, codec, envelopes }),
    provider,
    tools: deps.tools,
    ...(deps.hooks ? { hooks: deps.hooks } : {}),
    ...(deps.memory ? { memory: deps.memory } : {}),
    ...(deps.profiles ? { agents: { profiles: deps.profiles, caller: createAgentCaller({ nc, codec, subjects, log, logger }) } } : {}),
    tokens: deps.tokens,
    toolTokens: (specs: readonly ToolSpec[]) => {
      const key = specs.map((spec) => spec.name).join(',');
      let count = toolTokenCache.get(key);
      if (count === undefined) {
        count = deps.tokens.count(JSON.stringify(specs));
        if (toolTokenCache.size > 100) toolTokenCache.clear();
        toolTokenCache.set(key, count);
      }
      return count;
    },
    scrubber: deps.scrubber,
    logger,
    config,
    newId: deps.newId,
    now: deps.now,
    outputSchemas: createOutputSchemaCompiler(),
    giveUp: (session) => void sessions.giveUp(session),
    // While this node's heartbeat is current nobody can have taken its sessions; otherwise (it was paused or
    // cut off) a write first reads the lease back, and one another node took is refused before the log is asked.
    writeGuard: (tenant, sessionId) => {
      if (liveness.selfCurrent()) return undefined;
      return leases.claim(tenant, sessionId).then((claimed) => {
        if (!claimed.held) throw new LogConflictError(sessionId, transcriptSeqUnknown, { holder: claimed.owner });
      });
    },
  };

  let stopping = false;
  const forwarder = createForwarder(nc, config.prefix);
  const sessions: HostedSessions = createHostedSessions({
    open: (tenant, sessionId, lastSeq) => openSession(hostDeps, tenant, sessionId, lastSeq ? { lastSeq } : {}),
    readAhead: (tenant, sessionId) => log.lastSeq(tenant, sessionId),
    // A deleted session (its tombstone) is refused before anything of it is opened.
    beforeOpen: async (tenant, sessionId) => {
      deleter.refuseWhileDeleting(tenant, sessionId);
      if (await tombstones.isDeleted(tenant, sessionId)) throw new SessionDeletedError(`session ${tenant}/${sessionId} was deleted`, { tenant, sessionId });
    },
    leases,
    logger,
    now: deps.now,
    idleMs: config.idleMs,
    stopping: () => stopping,
  });
  const deleter: SessionDeleter = createSessionDeleter({
    jsm,
    streams: { log: names.log, live: names.live, ledger: `KV_${buckets.ledger}` },
    subjects,
    log,
    tombstones,
    leases,
    hostedSession: async (tenant, sessionId) => sessions.known(tenant, sessionId),
    othersInFlight: (tenant, sessionId) => Math.max(0, handler.inFlight(tenant, sessionId) - 1),
    drop: (tenant, sessionId) => sessions.forget(tenant, sessionId),
    logger,
  });
  const forker = createSessionForker({ log, tombstones, envelopes, newId: deps.newId, nodeId: config.nodeId, logger });
  const handler = createSessionMessageHandler({
    outputSchemas: hostDeps.outputSchemas,
    codec,
    subjects,
    config,
    logger,
    admission,
    refusals,
    leases,
    sessions,
    deleter,
    forker,
    tombstones,
    log,
    live: hostDeps.live,
    parked,
    ...(config.ingress === IngressMode.queue ? { forward: (owner: string, message: SessionMessage, origin: MessageOrigin) => forwarder.forward(owner, message, origin) } : {}),
    stopping: () => stopping,
    ...(deps.onHandled ? { onHandled: deps.onHandled } : {}),
    ...(limits && config.limits?.spend.length ? { checkSpend: (tenant: string) => limits.checkPrompt(tenant) } : {}),
  });
  const ingress = await startIngress({ nc, subjects, prefix: config.prefix, nodeId: config.nodeId, replies, handler, forwarder, logger, mode: config.ingress });
  // Counted among the nodes that hear session messages only now: the others may pick this node for a new session.
  liveness.markReady(true);

  // Every lease of the bucket is read at start and when a node is found dead (a dead node's sessions are found only
  // so), and again at each sweep until one such read ends with every orphan claimed or judged: `fullScansWanted`
  // counts the reasons, `fullScansDone` the last one a complete read covered.
  let fullScansWanted = 1;
  let fullScansDone = 0;
  const adoptAll = async () => {
    const wanted = fullScansWanted;
    if (await sessions.adoptOrphans({ full: true })) fullScansDone = Math.max(fullScansDone, wanted);
  };
  const adoptOrphans = () => void adoptAll().catch((err: unknown) => logger.warn({ err }, 'could not look for orphaned sessions'));
  // A node found dead: the messages kept for it are handled by this node (which claims each session, or passes
  // the message on to the node that did), and its sessions with work left are resumed.
  liveness.onDead((node) => {
    for (const { verb, message, origin } of parked.take(node)) {
      void handler.handle(verb, message, origin, { replayed: true }).catch((err: unknown) => logger.error({ err }, 'kept message handling failed'));
    }
    fullScansWanted += 1;
    adoptOrphans();
  });
  // This node was silent past the TTL: the leases others took are theirs now.
  liveness.onSelfLapse(() => leases.verifyAll(sessions.dropLost));

  let ticks = 0;
  const maintenance = setInterval(() => {
    void (async () => {
      ticks += 1;
      admission.prune();
      const dropped = parked.prune();
      if (dropped > 0) logger.warn({ dropped }, 'messages kept for other nodes dropped for room; if their holder died, they go unanswered');
      await sessions.passivateIdle();
      if (ticks % 2 !== 0) return;
      await leases.retryMarkers();
      // A whole read of the bucket still owed (the last one could not judge or claim everything): again, by this node.
      if (fullScansDone < fullScansWanted) return adoptAll();
      // Orphans of a dead node are found when it is (onDead); this sweep catches sessions given up or released with
      // work, from the markers written since the last sweep (not the whole bucket), by one node of a settled fleet.
      if (sweepsOrphans(liveness.view(), config.nodeId)) await sessions.adoptOrphans();
    })().catch((err: unknown) => logger.warn({ err }, 'runtime maintenance failed'));
  }, Math.max(500, config.leaseTtlMs));
  adoptOrphans();

  logger.info({ prefix: config.prefix }, 'runtime started');
  return {
    sessions: () => sessions.size(),
    ingress: () => {
      const claims = leases.counts();
      return { ...ingress.counts(), claimsAsked: claims.asked, claimsPresumed: claims.presumed };
    },
    async stop() {
      stopping = true;
      // Picked for no new session from now on (the others hear it with this node's next heartbeat).
      liveness.markReady(false);
      clearInterval(maintenance);
      // What the server sent this node already is handled while it still holds its sessions; messages passed on
      // to it from now on are kept by the nodes that passed them, and answered once this node is gone (below).
      await ingress.drain(config.leaseTtlMs);
      refusals.close();
      await sessions.releaseAll();
      // Last: the others take what this node released (and the messages they kept for it) at once.
      await liveness.stop();
    },
  };
}
