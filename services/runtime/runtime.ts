import type { Msg, NatsConnection, Subscription } from '@nats-io/nats-core';
import { jetstream, jetstreamManager } from '@nats-io/jetstream';
import { Kvm } from '@nats-io/kv';
import { createSessionLog } from '../../src/bus/session-log.ts';
import { ensureStreams } from '../../src/bus/streams.ts';
import { msgpackHeaders } from '../../src/bus/request.ts';
import { AgentbusError, ErrorCode, LogConflictError, toErrorData } from '../../src/errors.ts';
import type { Logger } from '../../src/logging.ts';
import {
  SessionVerb,
  createEnvelopeFactory,
  createSubjects,
  decodeApprove,
  decodeCancel,
  decodePrompt,
  decodeSteer,
  streamNames,
} from '../../src/protocol/index.ts';
import type { Codec, CommandReply, PromptReply, ToolSpec } from '../../src/protocol/index.ts';
import type { Scrubber } from '../../src/scrub.ts';
import type { TokenCounter } from '../../src/tokens.ts';
import type { RuntimeConfig } from './config.ts';
import { createLivePublisher } from './live-publisher.ts';
import { createSessionLeases } from './leases.ts';
import type { SessionLeases } from './leases.ts';
import type { ProviderPort, ToolPort } from './ports.ts';
import { openSession } from './session-host.ts';
import { createSessionLogic } from './turn-actors.ts';
import type { CommandResult, SessionHost, SessionHostDeps } from './session-host.ts';

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
  readonly tokens: TokenCounter;
  readonly scrubber: Scrubber;
  readonly newId: () => string;
  readonly now: () => number;
}

/**
 * Starts the runtime: ensures the streams, then serves `prompt`, `cancel`, `steer` and `approve` of every
 * session. Each session is hosted by the node that holds its lease; the others ignore its messages.
 */
export async function startRuntime(deps: RuntimeDeps): Promise<Runtime> {
  const { nc, codec, config } = deps;
  const logger = deps.logger.child({ service: 'runtime', node: config.nodeId });
  const subjects = createSubjects(config.prefix);
  const jsm = await jetstreamManager(nc);
  const names = await ensureStreams(jsm, { prefix: config.prefix });
  const log = createSessionLog({ nc, js: jetstream(nc), subjects, codec, stream: names.log, logger });
  const kv = await new Kvm(nc).create(streamNames(config.prefix).leases, { history: 1 });
  const leases: SessionLeases = createSessionLeases({ kv, codec, nodeId: config.nodeId, ttlMs: config.leaseTtlMs, now: deps.now, logger });
  const envelopes = createEnvelopeFactory({ newId: deps.newId, now: deps.now });
  const toolTokenCache = new Map<string, number>();
  const hostDeps: SessionHostDeps = {
    logic: createSessionLogic({ approvalTimeoutMs: config.approvalTimeoutMs }),
    log,
    envelopes,
    live: createLivePublisher({ nc, subjects, codec, envelopes }),
    provider: deps.provider,
    tools: deps.tools,
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
  };

  // An opened session is kept as itself, not as the promise that opened it: one object less per idle session.
  const hosts = new Map<string, SessionHost | Promise<SessionHost>>();
  // Last use per session in ms since the runtime started: a small integer, not a boxed number per session.
  const epoch = deps.now();
  const lastUsed = new Map<string, number>();
  const keyOf = (tenant: string, sessionId: string) => `${tenant}.${sessionId}`;
  let stopping = false;

  /**
   * The session's host, opened on first use. `forPrompt`: the prompt's handler keeps the lease's `active`
   * flag from then on; for any other opener it is watched here.
   */
  function host(tenant: string, sessionId: string, options: { forPrompt?: boolean } = {}): Promise<SessionHost> {
    const key = keyOf(tenant, sessionId);
    lastUsed.set(key, deps.now() - epoch);
    const known = hosts.get(key);
    if (known) return Promise.resolve(known);
    const opening = openSession(hostDeps, tenant, sessionId).then((opened) => {
      if (hosts.get(key) === opening) hosts.set(key, opened);
      // Watching now would write `active: false` between the prompt's claim and its logging, then `true` again.
      if (!options.forPrompt) watchActivity(opened);
      return opened;
    });
    opening.catch((err: unknown) => {
      logger.error({ err, tenant, sessionId }, 'session could not be opened');
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

  function reply(message: Msg, body: PromptReply | CommandReply) {
    if (message.reply) message.respond(codec.encode(body), { headers: msgpackHeaders() });
  }

  function publishError(tenant: string, sessionId: string, error: ReturnType<typeof toErrorData>, subject: string) {
    hostDeps.live.publish('error', { tenant, sessionId }, { ...error, subject });
  }

  async function handle(verb: SessionVerb, message: Msg): Promise<void> {
    const parsed = subjects.parseSession(message.subject);
    if (!parsed) {
      const error = { code: 'invalid_input', message: `bad session subject ${message.subject}: tenant and session id must match [A-Za-z0-9_-]{1,64}`, retryable: false };
      reply(message, verb === SessionVerb.prompt ? { accepted: false, sessionId: '', error } : { ok: false, error });
      return;
    }
    const { tenant, sessionId } = parsed;
    // Only the lease holder acts; every other node stays silent.
    // A prompt's claim marks the lease active in the same write (active before the prompt is logged).
    if (!(await leases.claim(tenant, sessionId, verb === SessionVerb.prompt ? { active: true } : {}))) return;
    const contentType = message.headers?.get('Content-Type') || undefined;
    try {
      switch (verb) {
        case SessionVerb.prompt: {
          const prompt = decodePrompt(codec, message.data, contentType);
          const session = await host(tenant, sessionId, { forPrompt: true });
          // Active before the prompt is logged: if this node dies now, another one resumes the turn.
          await leases.setActive(tenant, sessionId, true);
          const { turnId } = await session.prompt(prompt);
          watchActivity(session);
          reply(message, { accepted: true, sessionId, turnId });
          return;
        }
        case SessionVerb.cancel: {
          const cancel = decodeCancel(codec, message.data, contentType);
          replyCommand(message, (await existingHost(tenant, sessionId)).cancel(cancel.reason));
          return;
        }
        case SessionVerb.steer: {
          const steer = decodeSteer(codec, message.data, contentType);
          replyCommand(message, (await existingHost(tenant, sessionId)).steer(steer.text));
          return;
        }
        case SessionVerb.approve: {
          const decision = decodeApprove(codec, message.data, contentType);
          replyCommand(message, await (await existingHost(tenant, sessionId)).approve(decision));
          return;
        }
      }
    } catch (err) {
      // The log moved past what this host's writer expects (another writer, or more junk than it steps over):
      // the session is opened again from its log rather than refusing every later message too.
      const hosted = openedHost(tenant, sessionId);
      if (err instanceof LogConflictError && hosted) await giveUp(hosted);
      // A refused message must not leave a lease behind for a session this node does not host.
      if (!hosts.has(keyOf(tenant, sessionId))) await leases.release(tenant, sessionId);
      const error = toErrorData(err);
      logger.warn({ err, tenant, sessionId, verb }, 'message refused');
      if (verb === SessionVerb.prompt) {
        // The claim marked the lease active for this prompt; without a turn to run it is not.
        if (!openedHost(tenant, sessionId)?.busy()) void leases.setActive(tenant, sessionId, false).catch((cause: unknown) => logger.warn({ err: cause }, 'lease activity not recorded'));
      }
      reply(message, verb === SessionVerb.prompt ? { accepted: false, sessionId, error } : { ok: false, error });
      publishError(tenant, sessionId, error, message.subject);
    }
  }

  /** The host of a session that exists; a command to one that never had a prompt is refused, not created. */
  async function existingHost(tenant: string, sessionId: string): Promise<SessionHost> {
    if (!hosts.has(keyOf(tenant, sessionId)) && (await log.lastSeq(tenant, sessionId)) === 0) {
      throw new AgentbusError(ErrorCode.notFound, `session ${tenant}/${sessionId} does not exist`);
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
      if (!(await leases.claim(orphan.tenant, orphan.sessionId))) continue;
      logger.info(orphan, 'resuming a session another node left');
      await host(orphan.tenant, orphan.sessionId).catch(() => undefined);
    }
  }

  const maintenance = setInterval(() => {
    void (async () => {
      await leases.renewAll((tenant, sessionId) => {
        const key = keyOf(tenant, sessionId);
        const opening = hosts.get(key);
        hosts.delete(key);
        if (opening) void Promise.resolve(opening).then((opened) => opened.stop());
        logger.warn({ tenant, sessionId }, 'lease taken by another node; session stopped here');
      });
      await passivateIdle();
      await adoptOrphans();
    })().catch((err: unknown) => logger.warn({ err }, 'runtime maintenance failed'));
  }, Math.max(250, Math.floor(config.leaseTtlMs / 3)));
  void adoptOrphans().catch((err: unknown) => logger.warn({ err }, 'could not look for orphaned sessions'));

  logger.info({ prefix: config.prefix }, 'runtime started');
  return {
    sessions: () => hosts.size,
    async stop() {
      stopping = true;
      clearInterval(maintenance);
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
    },
  };
}
