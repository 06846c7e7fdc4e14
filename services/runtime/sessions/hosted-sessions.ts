import { SessionDeletedError } from '../../../src/errors.ts';
import type { Logger } from '../../../src/logging.ts';
import type { OrphanSession, SessionLeases } from '../node/leases.ts';
import type { SessionHost } from './session-host.ts';

/**
 * The sessions this node hosts: each opened on first use from its log, kept while used, passivated when idle,
 * given up when its log cannot be written as expected, and dropped when another node took its lease. Holds no
 * connection, subscription or timer: the runtime's wiring calls {@link HostedSessions.passivateIdle} and
 * {@link HostedSessions.adoptOrphans} from its maintenance tick and when a node is found dead.
 */
export interface HostedSessions {
  /**
   * The session's host, opened on first use. `forPrompt`: the prompt's handler keeps the lease's `active`
   * flag from then on; for any other opener it is watched here.
   */
  host(tenant: string, sessionId: string, options?: { forPrompt?: boolean }): Promise<SessionHost>;
  /** The session's host once it is open; undefined while it opens or when this node does not host it. */
  opened(tenant: string, sessionId: string): SessionHost | undefined;
  /** The host opened or opening, if this node hosts the session (a failed opening resolves to undefined). */
  known(tenant: string, sessionId: string): Promise<SessionHost | undefined> | undefined;
  /** True while this node hosts (or opens) the session. */
  has(tenant: string, sessionId: string): boolean;
  /** Forgets the session without stopping it (its deletion stopped it). */
  forget(tenant: string, sessionId: string): void;
  /** Keeps the lease's `active` flag in step with the session until it goes idle. */
  watchActivity(opened: SessionHost): void;
  /**
   * Stops hosting a session whose log this node cannot write as it thought (a turn could not log its end,
   * or another writer's event is there). Its lease is released marked active, so that whichever node claims
   * it next (this one too) reads the log again and resumes the turns left unfinished there; when another
   * node already holds the lease, the release changes nothing.
   */
  giveUp(session: SessionHost): Promise<void>;
  /**
   * Stops hosting a session another node took while this one was silent (paused, or cut off): its host must
   * not write again; the log's expected sequence would refuse it anyway.
   */
  dropLost(tenant: string, sessionId: string): void;
  /** Stops and releases every session idle for `idleMs`. */
  passivateIdle(): Promise<void>;
  /**
   * Claims and opens active sessions nobody runs, resuming their turns: with `full`, every such lease of the bucket
   * (released with work, or held by a dead node); otherwise only those released with work since the last sweep
   * (their markers). Resolves `false` when some claim got no answer from the bucket, or some holder could not be
   * judged (look again later).
   */
  adoptOrphans(options?: { full?: boolean }): Promise<boolean>;
  /** Stops every session and releases its lease, marked active when it had work (another node resumes it). */
  releaseAll(): Promise<void>;
  size(): number;
}

/** What {@link createHostedSessions} works with. */
export interface HostedSessionsDeps {
  /** Opens a session from its log (`openSession`). */
  readonly open: (tenant: string, sessionId: string, lastSeq?: Promise<number>) => Promise<SessionHost>;
  /**
   * The session's last log sequence, asked at once so that it travels beside `beforeOpen`'s read instead of after
   * it (one round trip less before a new session's prompt is logged); handed to `open`. Absent: `open` asks.
   */
  readonly readAhead?: (tenant: string, sessionId: string) => Promise<number>;
  /** Refuses a session that may not be opened (deleted, or being deleted): throws `SessionDeletedError`. */
  readonly beforeOpen: (tenant: string, sessionId: string) => Promise<void>;
  readonly leases: SessionLeases;
  readonly logger: Logger;
  readonly now: () => number;
  readonly idleMs: number;
  /** True once the node stops: no orphan is adopted then. */
  readonly stopping: () => boolean;
}

/** @example const sessions = createHostedSessions({ open, beforeOpen, leases, logger, now: Date.now, idleMs: 300_000, stopping: () => false }); */
export function createHostedSessions(deps: HostedSessionsDeps): HostedSessions {
  const { leases, logger } = deps;
  // An opened session is kept as itself, not as the promise that opened it: one object less per idle session.
  const hosts = new Map<string, SessionHost | Promise<SessionHost>>();
  // Last use per session in ms since the runtime started: a small integer, not a boxed number per session.
  const epoch = deps.now();
  const lastUsed = new Map<string, number>();
  const keyOf = (tenant: string, sessionId: string) => `${tenant}.${sessionId}`;
  const forget = (key: string) => {
    hosts.delete(key);
    lastUsed.delete(key);
  };

  function watchActivity(opened: SessionHost) {
    const mark = async (): Promise<void> => {
      const busy = opened.busy();
      await leases.setActive(opened.tenant, opened.sessionId, busy);
      // A stopped session keeps its lease's flag: the node releasing it decides.
      if (busy && (await opened.whenIdle())) return mark();
    };
    void mark().catch((err: unknown) => logger.warn({ err }, 'lease activity not recorded'));
  }

  function host(tenant: string, sessionId: string, options: { forPrompt?: boolean } = {}): Promise<SessionHost> {
    const key = keyOf(tenant, sessionId);
    lastUsed.set(key, deps.now() - epoch);
    const known = hosts.get(key);
    if (known) return Promise.resolve(known);
    const lastSeq = deps.readAhead?.(tenant, sessionId);
    // Not awaited when the session is refused: its failure is then nobody's.
    lastSeq?.catch(() => undefined);
    const opening = deps
      .beforeOpen(tenant, sessionId)
      .then(() => deps.open(tenant, sessionId, lastSeq))
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

  return {
    host,
    watchActivity,
    opened(tenant, sessionId) {
      const known = hosts.get(keyOf(tenant, sessionId));
      return known instanceof Promise ? undefined : known;
    },
    known(tenant, sessionId) {
      const known = hosts.get(keyOf(tenant, sessionId));
      return known === undefined ? undefined : Promise.resolve(known).catch(() => undefined);
    },
    has: (tenant, sessionId) => hosts.has(keyOf(tenant, sessionId)),
    forget: (tenant, sessionId) => forget(keyOf(tenant, sessionId)),
    async giveUp(session) {
      const { tenant, sessionId } = session;
      const key = keyOf(tenant, sessionId);
      session.stop();
      if (hosts.get(key) !== session) return;
      forget(key);
      logger.warn({ tenant, sessionId }, 'session given up on this node; it will be opened again from its log');
      try {
        await leases.setActive(tenant, sessionId, true);
        await leases.release(tenant, sessionId);
      } catch (err) {
        logger.warn({ err, tenant, sessionId }, 'lease of a given-up session not released; it will expire');
      }
    },
    dropLost(tenant, sessionId) {
      const key = keyOf(tenant, sessionId);
      const opening = hosts.get(key);
      if (!opening) return;
      forget(key);
      void Promise.resolve(opening).then((opened) => opened.stop(), () => undefined);
      logger.warn({ tenant, sessionId }, 'lease taken by another node; session stopped here');
    },
    async passivateIdle() {
      for (const [key, opening] of hosts) {
        const opened = await Promise.resolve(opening).catch(() => undefined);
        if (!opened || opened.busy()) continue;
        if (deps.now() - epoch - (lastUsed.get(key) ?? 0) < deps.idleMs) continue;
        forget(key);
        opened.stop();
        await leases.release(opened.tenant, opened.sessionId);
      }
    },
    async adoptOrphans(options = {}) {
      let answered = true;
      let orphans: OrphanSession[];
      if (options.full) {
        const listed = await leases.orphans();
        orphans = listed.found;
        answered = listed.complete;
      } else {
        orphans = await leases.released();
      }
      for (const orphan of orphans) {
        if (deps.stopping()) return answered;
        const claimed = await leases.claim(orphan.tenant, orphan.sessionId);
        if (!claimed.held) {
          if (claimed.owner === '') answered = false;
          continue;
        }
        logger.info(orphan, 'resuming a session another node left');
        await host(orphan.tenant, orphan.sessionId).catch(async (err: unknown) => {
          // A session deleted meanwhile has nothing to resume, and its lease must not stay behind.
          if (err instanceof SessionDeletedError) await leases.forget(orphan.tenant, orphan.sessionId);
        });
      }
      return answered;
    },
    async releaseAll() {
      for (const [, opening] of hosts) {
        const opened = await Promise.resolve(opening).catch(() => undefined);
        if (!opened) continue;
        const busy = opened.busy();
        opened.stop();
        await leases.setActive(opened.tenant, opened.sessionId, busy);
        await leases.release(opened.tenant, opened.sessionId);
      }
      hosts.clear();
      lastUsed.clear();
    },
    size: () => hosts.size,
  };
}
