import { msgpackHeaders } from '../../../src/bus/request.ts';
import type { SessionLog } from '../../../src/bus/session-log.ts';
import { AgentbusError, ErrorCode, LogConflictError, SessionDeletedError, toErrorData } from '../../../src/errors.ts';
import type { Logger } from '../../../src/logging.ts';
import type { RefusalLog } from '../../../src/refusal-log.ts';
import { traceContextOfHeaders } from '../../../src/telemetry/index.ts';
import { SessionVerb, contentTypeOf, decodeApprove, decodeCancel, decodeDelete, decodeFork, decodeInput, decodePrompt, decodeSteer } from '../../../src/protocol/index.ts';
import type { Codec, CommandReply, DeleteReply, ForkReply, PromptReply, Subjects } from '../../../src/protocol/index.ts';
import type { RuntimeConfig } from '../config.ts';
import type { SessionLeases } from '../node/leases.ts';
import type { HostedSessions } from '../sessions/hosted-sessions.ts';
import type { LivePublisher } from '../sessions/live-publisher.ts';
import type { SessionDeleter } from '../sessions/session-delete.ts';
import type { SessionForker } from '../sessions/session-fork.ts';
import type { CommandResult, SessionHost } from '../sessions/session-host.ts';
import type { RuntimeTombstones } from '../sessions/tombstones.ts';
import { promptBytes } from './admission.ts';
import type { Admission } from './admission.ts';
import { MAX_FORWARD_HOPS } from './forward.ts';
import type { MessageOrigin, SessionMessage } from './forward.ts';
import type { ParkedMessages } from './parked-messages.ts';
import { withinCeilings } from './prompt-ceilings.ts';
import { compileOutputSchema } from '../../../src/output-schema.ts';
import type { OutputSchemaCompiler } from '../../../src/output-schema.ts';

/** Handles one session message on this node: acts on it as the session's holder, or passes it on to the holder. */
export interface SessionMessageHandler {
  /**
   * `origin`: the subject the client published on and the forwards it took. `replayed`: a message this node
   * kept for a holder since found dead (see {@link ParkedMessages}).
   */
  handle(verb: SessionVerb, message: SessionMessage, origin: MessageOrigin, options?: { replayed?: boolean }): Promise<void>;
  /** How many messages of the session are being acted on now (past the lease claim); the deleter waits for the others. */
  inFlight(tenant: string, sessionId: string): number;
}

/** What {@link createSessionMessageHandler} works with: every collaborator is passed in, none is opened here. */
export interface SessionMessageDeps {
  readonly codec: Codec;
  readonly subjects: Subjects;
  readonly config: Pick<RuntimeConfig, 'ceilings'>;
  readonly logger: Logger;
  readonly admission: Admission;
  readonly refusals: RefusalLog;
  readonly leases: SessionLeases;
  readonly sessions: HostedSessions;
  readonly deleter: SessionDeleter;
  readonly forker: SessionForker;
  readonly tombstones: RuntimeTombstones;
  readonly log: Pick<SessionLog, 'lastSeq'>;
  readonly live: LivePublisher;
  readonly parked: ParkedMessages;
  /**
   * Passes a message on to the node that holds its session (a publish on that node's forward subject); absent
   * when every node hears every message (`broadcast` ingress), where the holder heard it too.
   */
  readonly forward?: (owner: string, message: SessionMessage, origin: MessageOrigin) => void;
  /** True once the node stops: messages for other nodes are no longer kept. */
  readonly stopping: () => boolean;
  readonly onHandled?: (verb: SessionVerb, outcome: { durationMs: number; error?: string }) => void;
  /** Rejects (`spend_limit_exceeded`) when the tenant's spend reached a limit; absent when no spend limit is configured. */
  readonly checkSpend?: (tenant: string) => Promise<void>;
  /** Compiles typed prompts' `outputSchema`s (shared with the turns, which reuse what it compiled); absent: afresh each time. */
  readonly outputSchemas?: OutputSchemaCompiler;
}

/** @example const handler = createSessionMessageHandler(deps); await handler.handle(SessionVerb.prompt, message, directOrigin(message)); */
export function createSessionMessageHandler(deps: SessionMessageDeps): SessionMessageHandler {
  const { codec, subjects, leases, sessions, deleter, admission, refusals, logger } = deps;
  const keyOf = (tenant: string, sessionId: string) => `${tenant}.${sessionId}`;
  // Messages of each session being handled now (past the lease claim): a delete waits for none.
  const inFlight = new Map<string, number>();

  function reply(message: SessionMessage, body: PromptReply | CommandReply | DeleteReply | ForkReply) {
    if (message.reply) message.respond(codec.encode(body), { headers: msgpackHeaders() });
  }

  function replyCommand(message: SessionMessage, result: CommandResult) {
    reply(message, result.ok ? (result.turnId ? { ok: true, turnId: result.turnId } : { ok: true }) : { ok: false, error: result.error });
  }

  /**
   * The host of a session that exists; a command to one that never had a prompt is refused, not created, and
   * one to a deleted session says so.
   */
  async function existingHost(tenant: string, sessionId: string): Promise<SessionHost> {
    if (!sessions.has(tenant, sessionId)) {
      const [deleted, lastSeq] = await Promise.all([deps.tombstones.isDeleted(tenant, sessionId), deps.log.lastSeq(tenant, sessionId)]);
      if (deleted) throw new SessionDeletedError(`session ${tenant}/${sessionId} was deleted`, { tenant, sessionId });
      if (lastSeq === 0) throw new AgentbusError(ErrorCode.notFound, `session ${tenant}/${sessionId} does not exist`);
    }
    return sessions.host(tenant, sessionId);
  }

  async function handle(verb: SessionVerb, message: SessionMessage, origin: MessageOrigin, options: { replayed?: boolean } = {}): Promise<void> {
    const replayed = options.replayed === true;
    const parsed = subjects.parseSession(origin.subject);
    if (!parsed) {
      const error = { code: 'invalid_input', message: `bad session subject ${origin.subject}: tenant and session id must match [A-Za-z0-9_-]{1,64}`, retryable: false };
      reply(message, verb === SessionVerb.prompt ? { accepted: false, sessionId: '', error } : { ok: false, error });
      return;
    }
    const { tenant, sessionId } = parsed;
    // A tenant over its rate is refused before its messages cost a lease lookup, by the node that heard the
    // message from the queue group (each node counts the share of the tenant's messages it hears).
    const tenantRefusal = replayed || origin.hops > 0 ? undefined : admission.tenant(tenant);
    if (tenantRefusal) {
      refusals.refused({ ...tenantRefusal, tenant, sessionId, verb });
      reply(message, verb === SessionVerb.prompt ? { accepted: false, sessionId, error: tenantRefusal } : { ok: false, error: tenantRefusal });
      return;
    }
    // Only the lease holder acts. Another node passes the message on to the holder and keeps a copy until it
    // knows the holder lived on. A prompt's claim marks the lease active in the same write.
    // Every node heard it (`broadcast`): a session nobody is known to hold is claimed by the one node a settled
    // fleet agrees on, not raced for by all of them.
    const presume = deps.forward === undefined && !replayed;
    const claimed = await leases.claim(tenant, sessionId, { ...(verb === SessionVerb.prompt ? { active: true } : {}), ...(presume ? { presume } : {}) });
    if (!claimed.held) {
      sessions.dropLost(tenant, sessionId);
      if (claimed.owner === '') {
        // The bucket did not answer. Where other nodes tried too, one of them may have won: say nothing. Where this
        // node was the only one to hear the message (`queue`) or to try (the pick of a settled fleet), silence
        // would leave the requester waiting out its timeout: it is told to send again.
        if (deps.forward !== undefined || claimed.alone === true) {
          const error = { code: ErrorCode.unavailable, message: `session ${tenant}/${sessionId}: its lease could not be claimed now (the lease bucket did not answer); send again`, retryable: true };
          reply(message, verb === SessionVerb.prompt ? { accepted: false, sessionId, error } : { ok: false, error });
        }
        return;
      }
      // A node that stops keeps nothing (it will not be there to answer), but still passes on what it heard.
      if (!replayed && !deps.stopping()) deps.parked.park(claimed.owner, { verb, message, origin });
      if (deps.forward && origin.hops < MAX_FORWARD_HOPS) deps.forward(claimed.owner, message, origin);
      return;
    }
    const contentType = contentTypeOf(message);
    // A prompt or steer is logged with its request's reply subject; a replayed one already logged is recognised.
    const trace = traceContextOfHeaders(message.headers);
    const asRequest = { ...(message.reply ? { requestId: message.reply } : {}), dedupe: replayed, ...(trace ? { trace } : {}) };
    const started = performance.now();
    const key = keyOf(tenant, sessionId);
    inFlight.set(key, (inFlight.get(key) ?? 0) + 1);
    try {
      const refusal = admission.session(tenant, sessionId);
      if (refusal) throw new AgentbusError(refusal.code, refusal.message, { retryable: refusal.retryable });
      if (verb !== SessionVerb.delete) deleter.refuseWhileDeleting(tenant, sessionId);
      switch (verb) {
        case SessionVerb.prompt: {
          const prompt = withinCeilings(decodePrompt(codec, message.data, contentType), deps.config.ceilings);
          // A typed prompt's schema must compile: refused here, with what is wrong, rather than failing its turn.
          if (prompt.outputSchema) await (deps.outputSchemas?.compile(prompt.outputSchema) ?? compileOutputSchema(prompt.outputSchema));
          const tooLarge = admission.promptSize(promptBytes(prompt));
          if (tooLarge) throw new AgentbusError(tooLarge.code, tooLarge.message);
          await deps.checkSpend?.(tenant);
          const session = await sessions.host(tenant, sessionId, { forPrompt: true });
          // Active before the prompt is logged: if this node dies now, another one resumes the turn.
          await leases.setActive(tenant, sessionId, true);
          const { turnId } = await session.prompt(prompt, asRequest);
          sessions.watchActivity(session);
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
        case SessionVerb.input: {
          const answer = decodeInput(codec, message.data, contentType);
          replyCommand(message, await (await existingHost(tenant, sessionId)).input(answer));
          break;
        }
        case SessionVerb.delete: {
          decodeDelete(codec, message.data, contentType);
          const { purged, alreadyDeleted } = await deleter.delete(tenant, sessionId);
          reply(message, alreadyDeleted ? { ok: true, purged, alreadyDeleted } : { ok: true, purged });
          break;
        }
        case SessionVerb.fork: {
          // Acted on by the source's lease holder (one node), which only reads the source: it is not hosted for it.
          const forked = await deps.forker.fork(tenant, sessionId, decodeFork(codec, message.data, contentType));
          // Released unless this node hosts the source or handles another message of it now (a prompt opening it).
          if (!sessions.has(tenant, sessionId) && inFlight.get(key) === 1) await leases.release(tenant, sessionId);
          reply(message, { ok: true, sessionId: forked.sessionId, atSeq: forked.atSeq });
          break;
        }
      }
      deps.onHandled?.(verb, { durationMs: performance.now() - started });
    } catch (err) {
      // The log moved past what this host's writer expects (another writer, or more junk than it steps over):
      // the session is opened again from its log rather than refusing every later message too.
      const hosted = sessions.opened(tenant, sessionId);
      if (err instanceof LogConflictError && hosted) await sessions.giveUp(hosted);
      const error = toErrorData(err);
      const deleted = error.code === ErrorCode.sessionDeleted;
      // A refused message must not leave a lease behind for a session this node does not host; a deleted
      // session's must not even stay as a released one (an orphan to resume).
      if (deleted) await leases.forget(tenant, sessionId).catch((cause: unknown) => logger.warn({ err: cause, tenant, sessionId }, 'lease of a deleted session not removed'));
      else if (!sessions.has(tenant, sessionId) && deleter.phase(tenant, sessionId) === undefined) await leases.release(tenant, sessionId);
      // Bad input is expected, and a flood of it must not become a flood of log lines (nor of stacks).
      if (err instanceof AgentbusError && err.code !== ErrorCode.internal) refusals.refused({ ...error, tenant, sessionId, verb });
      else logger.warn({ err, tenant, sessionId, verb }, 'message refused');
      if (verb === SessionVerb.prompt && !deleted) {
        // The claim marked the lease active for this prompt; without a turn to run it is not.
        if (!sessions.opened(tenant, sessionId)?.busy()) void leases.setActive(tenant, sessionId, false).catch((cause: unknown) => logger.warn({ err: cause }, 'lease activity not recorded'));
      }
      reply(message, verb === SessionVerb.prompt ? { accepted: false, sessionId, error } : { ok: false, error });
      deps.onHandled?.(verb, { durationMs: performance.now() - started, error: `${error.code}: ${error.message}` });
      // A session sending too fast is not told again on its live subjects: that would feed the flood. Nothing
      // is written under a deleted session's subjects again.
      // A replayed message's refusal (a cancel the dead holder had done) is for its requester alone.
      if (error.code !== ErrorCode.rateLimited && !deleted && !replayed) deps.live.publish('error', { tenant, sessionId }, { ...error, subject: origin.subject });
    } finally {
      const left = (inFlight.get(key) ?? 1) - 1;
      if (left > 0) inFlight.set(key, left);
      else inFlight.delete(key);
    }
  }

  return {
    handle,
    inFlight: (tenant, sessionId) => inFlight.get(keyOf(tenant, sessionId)) ?? 0,
  };
}
