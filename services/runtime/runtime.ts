import type { Msg, NatsConnection, Subscription } from '@nats-io/nats-core';
import { jetstream, jetstreamManager } from '@nats-io/jetstream';
import { Kvm } from '@nats-io/kv';
import { createSessionLog } from '../../src/bus/session-log.ts';
import { ensureStreams } from '../../src/bus/streams.ts';
import { msgpackHeaders } from '../../src/bus/request.ts';
import { AgentbusError, ErrorCode, LogConflictError, SessionDeletedError, toErrorData } from '../../src/errors.ts';
import type { Logger } from '../../src/logging.ts';
import {
  SessionVerb,
  createEnvelopeFactory,
  createSubjects,
  decodeApprove,
  decodeCancel,
  decodeDelete,
  decodePrompt,
  decodeSteer,
  streamNames,
} from '../../src/protocol/index.ts';
import type { Codec, CommandReply, DeleteReply, PromptReply, ToolSpec } from '../../src/protocol/index.ts';
import type { Scrubber } from '../../src/scrub/index.ts';
import type { TokenCounter } from '../../src/tokens.ts';
import { checkCeilings } from './config.ts';
import type { RuntimeConfig } from './config.ts';
import { createRefusalLog } from '../../src/refusal-log.ts';
import { createReplyGuard, replyPolicyOf } from '../../src/bus/reply-guard.ts';
import type { ReplyPolicy } from '../../src/bus/reply-guard.ts';
import { createAdmission } from './ingress/admission.ts';
import { withinCeilings } from './ingress/prompt-ceilings.ts';
import { createLivePublisher } from './sessions/live-publisher.ts';
import { createSessionLeases } from './node/leases.ts';
import type { SessionLeases } from './node/leases.ts';
import { startNodeLiveness } from './node/node-liveness.ts';
import { createParkedMessages } from './ingress/parked-messages.ts';
import type { ProviderPort, ToolPort } from './ports.ts';
import type { MemoryPort } from './context/recall.ts';
import type { ToolHooks } from './tools/tool-hooks.ts';
import { createSessionDeleter } from './sessions/session-delete.ts';
import type { SessionDeleter } from './sessions/session-delete.ts';
import { openSession } from './sessions/session-host.ts';
import { createRuntimeTombstones } from './sessions/tombstones.ts';
import type { RuntimeTombstones } from './sessions/tombstones.ts';
import { createSessionLogic } from './turn/turn-actors.ts';
import type { CommandResult, SessionHost, SessionHostDeps } from './sessions/session-host.ts';

/** The runtime service of one node. */
export interface Runtime {
  /** Sessions hosted on this node now. */
  sessions(): number;
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
}

/**
 * Starts the runtime: ensures the streams and buckets, then serves `prompt`, `cancel`, `steer`, `approve` and
 * `delete` of every session. Each session is hosted by the node that holds its lease; the others ignore its
 * messages. A deleted session's id is refused (`session_deleted`) from then on.
 */
export async function startRuntime(deps: RuntimeDeps): Promise<Runtime> {
  const { nc, codec, config } = deps;
  checkCeilings(config);
  const logger = deps.logger.child({ service: 'runtime', node: config.nodeId });
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
  const tombstones: RuntimeTombstones = createRuntimeTombstones({ kv: tombstoneBucket, codec, nodeId: config.nodeId, now: deps.now });
  // A write refused by the lease guard never reached the log: there is no sequence to name.
  const transcriptSeqUnknown = -1;
  const envelopes = createEnvelopeFactory({ newId: deps.newId, now: deps.now });
  const toolTokenCache = new Map<string, number>();
  const admission = createAdmission(config.admission, deps.now);
  const refusals = createRefusalLog({ logger });
  const replies = createReplyGuard({ policy: deps.replyPolicy ?? replyPolicyOf(nc), refusals });
  const hostDeps: SessionHostDeps = {
    logic: createSessionLogic({ approvalTimeoutMs: config.approvalTimeoutMs }),
    log,
    envelopes,
    live: createLivePublisher({ nc, subjects, codec, envelopes }),
    provider: deps.provider,
    tools: deps.tools,
    ...(deps.hooks ? { hooks: deps.hooks } : {}),
    ...(deps.memory ? { memory: deps.memory } : {}),
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
    giveUp: (session) => void giveUp(session),
    // While this node's heartbeat is current nobody can have taken its sessions; otherwise (it was paused or
    // cut off) a write first reads the lease back, and one another node took is refused before the log is asked.
    writeGuard: (tenant, sessionId) => {
      if (liveness.selfCurrent()) return undefined;
      return leases.claim(tenant, sessionId).then((claimed) => {
        if (!claimed.held) throw new LogConflictError(sessionId, transcriptSeqUnknown, { holder: claimed.owner });
      });
    },
  };

  // An opened session is kept as itself, not as the promise that opened it: one object less per idle session.
  const hosts = new Map<string, SessionHost | Promise<SessionHost>>();
  // Last use per session in ms since the runtime started: a small integer, not a boxed number per session.
  const epoch = deps.now();
  const lastUsed = new Map<string, number>();
  const keyOf = (tenant: string, sessionId: string) => `${tenant}.${sessionId}`;
  // Messages of each session being handled now (past the lease claim): a delete waits for none.
  const inFlight = new Map<string, number>();
  let stopping = false;
  const deleter: SessionDeleter = createSessionDeleter({
    jsm,
    streams: { log: names.log, live: names.live, ledger: `KV_${buckets.ledger}` },
    subjects,
    log,
    tombstones,
    leases,
    hostedSession: async (tenant, sessionId) => {
      const known = hosts.get(keyOf(tenant, sessionId));
      return known === undefined ? undefined : Promise.resolve(known).catch(() => undefined);
    },
    othersInFlight: (tenant, sessionId) => (inFlight.get(keyOf(tenant, sessionId)) ?? 1) - 1,
    drop: (tenant, sessionId) => {
      hosts.delete(keyOf(tenant, sessionId));
      lastUsed.delete(keyOf(tenant, sessionId));
    },
    logger,
  });

  /** Refuses a session that was deleted (its tombstone), before anything of it is opened. */
  async function refuseDeleted(tenant: string, sessionId: string): Promise<void> {
    deleter.refuseWhileDeleting(tenant, sessionId);
    if (await tombstones.isDeleted(tenant, sessionId)) throw new SessionDeletedError(`session ${tenant}/${sessionId} was deleted`, { tenant, sessionId });
  }

  /**
   * The session's host, opened on first use. `forPrompt`: the prompt's handler keeps the lease's `active`
   * flag from then on; for any other opener it is watched here.
   */
  function host(tenant: string, sessionId: string, options: { forPrompt?: boolean } = {}): Promise<SessionHost> {
    const key = keyOf(tenant, sessionId);
    lastUsed.set(key, deps.now() - epoch);
    const known = hosts.get(key);
    if (known) return Promise.resolve(known);
    const opening = refuseDeleted(tenant, sessionId)
      .then(() => openSession(hostDeps, tenant, sessionId))
      .then((opened) => {
        if (hosts.get(key) === opening) hosts.set(key, opened);
        // Watching now would write `active: false` between the prompt's claim and its logging, then `true` again.
        if (!options.forPrompt) watchActivity(opened);
        return opened;
      });
    opening.catch((err: unknown) => {
      // A deleted session is refused, not broken: its refusal is logged as any other.
      if (!(err instanceof SessionDeletedError)) logger.error({ err, tenant, sessionId }, 'session could not be opened');
      if (hosts.get(key) === opening) hosts.delete(key);
    });
    hosts.set(key, opening);
    return opening;
  }

  /** The session's host once it is open; undefined while it opens or when this node does not host it. */
  function openedHost(tenant: string, sessionId: string): SessionHost | undefined {
    const known = hosts.get(keyOf(tenant, sessionId));
    return known instanceof Promise ? undefined : known;
  }

  /** Keeps the lease's `active` flag in step with the session until it goes idle. */
  function watchActivity(opened: SessionHost) {
    const mark = async (): Promise<void> => {
      const busy = opened.busy();
      await leases.setActive(opened.tenant, opened.sessionId, busy);
      // A stopped session keeps its lease's flag: the node releasing it decides.
      if (busy && (await opened.whenIdle())) return mark();
    };
    void mark().catch((err: unknown) => logger.warn({ err }, 'lease activity not recorded'));
  }

  /**
   * Stops hosting a session whose log this node cannot write as it thought (a turn could not log its end,
   * or another writer's event is there). Its lease is released marked active, so that whichever node claims
   * it next (this one too) reads the log again and resumes the turns left unfinished there; when another
   * node already holds the lease, the release changes nothing.
   */
  async function giveUp(session: SessionHost): Promise<void> {
    const { tenant, sessionId } = session;
    const key = keyOf(tenant, sessionId);
    session.stop();
    if (hosts.get(key) !== session) return;
    hosts.delete(key);
    lastUsed.delete(key);
    logger.warn({ tenant, sessionId }, 'session given up on this node; it will be opened again from its log');
    try {
      await leases.setActive(tenant, sessionId, true);
      await leases.release(tenant, sessionId);
    } catch (err) {
      logger.warn({ err, tenant, sessionId }, 'lease of a given-up session not released; it will expire');
    }
  }

  function reply(message: Msg, body: PromptReply | CommandReply | DeleteReply) {
    if (message.reply) message.respond(codec.encode(body), { headers: msgpackHeaders() });
  }

  function publishError(tenant: string, sessionId: string, error: ReturnType<typeof toErrorData>, subject: string) {
    hostDeps.live.publish('error', { tenant, sessionId }, { ...error, subject });
  }

  /**
   * Stops hosting a session another node took while this one was silent (paused, or cut off): its host must
   * not write again; the log's expected sequence would refuse it anyway.
   */
  function dropLost(tenant: string, sessionId: string) {
    const key = keyOf(tenant, sessionId);
    const opening = hosts.get(key);
    if (!opening) return;
    hosts.delete(key);
    lastUsed.delete(key);
    void Promise.resolve(opening).then((opened) => opened.stop(), () => undefined);
    logger.warn({ tenant, sessionId }, 'lease taken by another node; session stopped here');
  }

  /**
   * Handles one message of a session. `replayed`: a message this node kept while the session's holder was
   * alive, handled now that the holder was found dead (see {@link createParkedMessages}).
   */
  async function handle(verb: SessionVerb, message: Msg, replayed = false): Promise<void> {
    const parsed = subjects.parseSession(message.subject);
    if (!parsed) {
      const error = { code: 'invalid_input', message: `bad session subject ${message.subject}: tenant and session id must match [A-Za-z0-9_-]{1,64}`, retryable: false };
      reply(message, verb === SessionVerb.prompt ? { accepted: false, sessionId: '', error } : { ok: false, error });
      return;
    }
    const { tenant, sessionId } = parsed;
    // A tenant over its rate is refused before its messages cost a lease lookup. Every node sees every message
    // and keeps the same buckets, so they agree (a request takes the first reply).
    const tenantRefusal = replayed ? undefined : admission.tenant(tenant);
    if (tenantRefusal) {
      refusals.refused({ ...tenantRefusal, tenant, sessionId, verb });
      reply(message, verb === SessionVerb.prompt ? { accepted: false, sessionId, error: tenantRefusal } : { ok: false, error: tenantRefusal });
      return;
    }
    // Only the lease holder acts; every other node keeps the message until it knows the holder lived on.
    // A prompt's claim marks the lease active in the same write (active before the prompt is logged).
    const claimed = await leases.claim(tenant, sessionId, verb === SessionVerb.prompt ? { active: true } : {});
    if (!claimed.held) {
      dropLost(tenant, sessionId);
      if (!replayed && claimed.owner !== '' && !stopping) parked.park(claimed.owner, verb, message);
      return;
    }
    const contentType = message.headers?.get('Content-Type') || undefined;
    // A prompt or steer is logged with its request's reply subject; a replayed one already logged is recognised.
    const asRequest = { ...(message.reply ? { requestId: message.reply } : {}), dedupe: replayed };
    const started = performance.now();
    const key = keyOf(tenant, sessionId);
    inFlight.set(key, (inFlight.get(key) ?? 0) + 1);
    try {
      const refusal = admission.session(tenant, sessionId);
      if (refusal) throw new AgentbusError(refusal.code, refusal.message, { retryable: refusal.retryable });
      if (verb !== SessionVerb.delete) deleter.refuseWhileDeleting(tenant, sessionId);
      switch (verb) {
        case SessionVerb.prompt: {
          const prompt = withinCeilings(decodePrompt(codec, message.data, contentType), config.ceilings);
          const tooLarge = admission.promptSize(Buffer.byteLength(prompt.text, 'utf8'));
          if (tooLarge) throw new AgentbusError(tooLarge.code, tooLarge.message);
          const session = await host(tenant, sessionId, { forPrompt: true });
          // Active before the prompt is logged: if this node dies now, another one resumes the turn.
          await leases.setActive(tenant, sessionId, true);
          const { turnId } = await session.prompt(prompt, asRequest);
          watchActivity(session);
          reply(message, { accepted: true, sessionId, turnId });
          break;
        }
        case SessionVerb.cancel: {
          const cancel = decodeCancel(codec, message.data, contentType);
          replyCommand(message, (await existingHost(tenant, sessionId)).cancel(cancel.reason));
          break;
        }
        case SessionVerb.steer: {
          const steer = decodeSteer(codec, message.data, contentType);
          replyCommand(message, (await existingHost(tenant, sessionId)).steer(steer.text, asRequest));
          break;
        }
        case SessionVerb.approve: {
          const decision = decodeApprove(codec, message.data, contentType);
          replyCommand(message, await (await existingHost(tenant, sessionId)).approve(decision));
          break;
        }
        case SessionVerb.delete: {
          decodeDelete(codec, message.data, contentType);
          const { purged, alreadyDeleted } = await deleter.delete(tenant, sessionId);
          reply(message, alreadyDeleted ? { ok: true, purged, alreadyDeleted } : { ok: true, purged });
          break;
        }
      }
      deps.onHandled?.(verb, { durationMs: performance.now() - started });
    } catch (err) {
      // The log moved past what this host's writer expects (another writer, or more junk than it steps over):
      // the session is opened again from its log rather than refusing every later message too.
      const hosted = openedHost(tenant, sessionId);
      if (err instanceof LogConflictError && hosted) await giveUp(hosted);
      const error = toErrorData(err);
      const deleted = error.code === ErrorCode.sessionDeleted;
      // A refused message must not leave a lease behind for a session this node does not host; a deleted
      // session's must not even stay as a released one (an orphan to resume).
      if (deleted) await leases.forget(tenant, sessionId).catch((cause: unknown) => logger.warn({ err: cause, tenant, sessionId }, 'lease of a deleted session not removed'));
      else if (!hosts.has(key) && deleter.phase(tenant, sessionId) === undefined) await leases.release(tenant, sessionId);
      // Bad input is expected, and a flood of it must not become a flood of log lines (nor of stacks).
      if (err instanceof AgentbusError && err.code !== ErrorCode.internal) refusals.refused({ ...error, tenant, sessionId, verb });
      else logger.warn({ err, tenant, sessionId, verb }, 'message refused');
      if (verb === SessionVerb.prompt && !deleted) {
        // The claim marked the lease active for this prompt; without a turn to run it is not.
        if (!openedHost(tenant, sessionId)?.busy()) void leases.setActive(tenant, sessionId, false).catch((cause: unknown) => logger.warn({ err: cause }, 'lease activity not recorded'));
      }
      reply(message, verb === SessionVerb.prompt ? { accepted: false, sessionId, error } : { ok: false, error });
      deps.onHandled?.(verb, { durationMs: performance.now() - started, error: `${error.code}: ${error.message}` });
      // A session sending too fast is not told again on its live subjects: that would feed the flood. Nothing
      // is written under a deleted session's subjects again.
      // A replayed message's refusal (a cancel the dead holder had done) is for its requester alone.
      if (error.code !== ErrorCode.rateLimited && !deleted && !replayed) publishError(tenant, sessionId, error, message.subject);
    } finally {
      const left = (inFlight.get(key) ?? 1) - 1;
      if (left > 0) inFlight.set(key, left);
      else inFlight.delete(key);
    }
  }

  /**
   * The host of a session that exists; a command to one that never had a prompt is refused, not created, and
   * one to a deleted session says so.
   */
  async function existingHost(tenant: string, sessionId: string): Promise<SessionHost> {
    if (!hosts.has(keyOf(tenant, sessionId))) {
      const [deleted, lastSeq] = await Promise.all([tombstones.isDeleted(tenant, sessionId), log.lastSeq(tenant, sessionId)]);
      if (deleted) throw new SessionDeletedError(`session ${tenant}/${sessionId} was deleted`, { tenant, sessionId });
      if (lastSeq === 0) throw new AgentbusError(ErrorCode.notFound, `session ${tenant}/${sessionId} does not exist`);
    }
    return host(tenant, sessionId);
  }

  function replyCommand(message: Msg, result: CommandResult) {
    reply(message, result.ok ? (result.turnId ? { ok: true, turnId: result.turnId } : { ok: true }) : { ok: false, error: result.error });
  }

  const subscriptions: Subscription[] = Object.values(SessionVerb).map((verb) =>
    nc.subscribe(subjects.anySession(verb), {
      callback: (error, message) => {
        if (error) {
          logger.warn({ err: error, verb }, 'subscription error');
          return;
        }
        // A reply subject the requester may not own is a deputy request: dropped whole, before any lease or log.
        if (!replies.admits(message, subjects.parseSession(message.subject)?.tenant)) return;
        void handle(verb, message).catch((err: unknown) => logger.error({ err }, 'message handling failed'));
      },
    }),
  );
  await nc.flush();

  async function passivateIdle() {
    for (const [key, opening] of hosts) {
      const opened = await Promise.resolve(opening).catch(() => undefined);
      if (!opened || opened.busy()) continue;
      if (deps.now() - epoch - (lastUsed.get(key) ?? 0) < config.idleMs) continue;
      hosts.delete(key);
      lastUsed.delete(key);
      opened.stop();
      await leases.release(opened.tenant, opened.sessionId);
    }
  }

  async function adoptOrphans() {
    for (const orphan of await leases.orphans()) {
      if (stopping) return;
      if (!(await leases.claim(orphan.tenant, orphan.sessionId)).held) continue;
      logger.info(orphan, 'resuming a session another node left');
      await host(orphan.tenant, orphan.sessionId).catch(async (err: unknown) => {
        // A session deleted meanwhile has nothing to resume, and its lease must not stay behind.
        if (err instanceof SessionDeletedError) await leases.forget(orphan.tenant, orphan.sessionId);
      });
    }
  }

  // A node found dead: the messages kept for it are handled by whichever node takes each session, and its
  // sessions with work left are resumed.
  liveness.onDead((node) => {
    for (const { verb, message } of parked.take(node)) {
      void handle(verb, message, true).catch((err: unknown) => logger.error({ err }, 'kept message handling failed'));
    }
    void adoptOrphans().catch((err: unknown) => logger.warn({ err }, 'could not look for orphaned sessions'));
  });
  // This node was silent past the TTL: the leases others took are theirs now.
  liveness.onSelfLapse(() => leases.verifyAll(dropLost));

  let ticks = 0;
  const maintenance = setInterval(() => {
    void (async () => {
      ticks += 1;
      admission.prune();
      const dropped = parked.prune();
      if (dropped > 0) logger.warn({ dropped }, 'messages kept for other nodes dropped for room; if their holder died, they go unanswered');
      await passivateIdle();
      // Orphans are mostly found when their node is (onDead); this sweep catches sessions given up or released with work.
      if (ticks % 2 === 0) await adoptOrphans();
    })().catch((err: unknown) => logger.warn({ err }, 'runtime maintenance failed'));
  }, Math.max(500, config.leaseTtlMs));
  void adoptOrphans().catch((err: unknown) => logger.warn({ err }, 'could not look for orphaned sessions'));

  logger.info({ prefix: config.prefix }, 'runtime started');
  return {
    sessions: () => hosts.size,
    async stop() {
      stopping = true;
      clearInterval(maintenance);
      refusals.close();
      for (const subscription of subscriptions) subscription.unsubscribe();
      for (const [, opening] of hosts) {
        const opened = await Promise.resolve(opening).catch(() => undefined);
        if (!opened) continue;
        const busy = opened.busy();
        opened.stop();
        await leases.setActive(opened.tenant, opened.sessionId, busy);
        await leases.release(opened.tenant, opened.sessionId);
      }
      hosts.clear();
      // Last: the others take what this node released (and the messages they kept for it) at once.
      await liveness.stop();
    },
  };
}
