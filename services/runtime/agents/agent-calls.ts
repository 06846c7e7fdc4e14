import type { NatsConnection } from '@nats-io/nats-core';
import { z } from 'zod';
import { createReplyMux } from '../../../src/bus/reply-mux.ts';
import type { ReplyMux } from '../../../src/bus/reply-mux.ts';
import { msgpackHeaders, request } from '../../../src/bus/request.ts';
import type { SessionLog } from '../../../src/bus/session-log.ts';
import { ErrorCode, abortReason, toErrorData } from '../../../src/errors.ts';
import { LogEventType, SessionVerb, TurnEndReason, ZERO_USAGE, addUsage, contentTypeOf } from '../../../src/protocol/index.ts';
import type { Codec, ErrorData, LogEvent, ParentCall, Prompt, Subjects, Usage } from '../../../src/protocol/index.ts';
import type { Logger } from '../../../src/logging.ts';
import { childSessionId } from './agent-tools.ts';
import type { ChildBudget } from './agent-tools.ts';
import type { AgentProfile } from './profiles.ts';

/** One agent call: the profile to run, the task, the calling turn's call and the budgets the child gets. */
export interface AgentCallRequest {
  readonly tenant: string;
  readonly profile: AgentProfile;
  readonly task: string;
  readonly parent: ParentCall;
  readonly budget: ChildBudget;
}

/** How an agent call ended: the child's answer (or its failure) and what its turn cost. */
export interface AgentCallResult {
  readonly output: string;
  readonly error?: ErrorData;
  /** The child session and turn, once the child was prompted. */
  readonly child?: { readonly sessionId: string; readonly turnId: string };
  readonly usage?: Usage;
  readonly cost?: number;
}

/** Runs agent calls as child sessions on the bus. */
export interface AgentCaller {
  /**
   * Starts (or, for a call already started, finds) the child session of the call and waits for its turn to end.
   * The child is prompted on its `prompt` subject, so whichever node ingress places it on runs it. An abort of
   * `signal` rejects with the signal's reason and leaves the child running (see `cancel`).
   */
  call(request: AgentCallRequest, options: { signal: AbortSignal }): Promise<AgentCallResult>;
  /**
   * Sends the child session of the call `effectId` a `cancel`. Not done on an abort of `call`: a caller's node that
   * stops (a drain, a crash) leaves its child running, for the caller resumed elsewhere to collect.
   */
  cancel(tenant: string, effectId: string, reason: string): void;
  /**
   * What the child turn of the call `effectId` spent: its `turn.ended` figures when it ends within `waitMs` (a child
   * just cancelled ends quickly), else the sum of what its log shows so far. Undefined when no child turn was started.
   */
  spent(tenant: string, effectId: string, options: { waitMs: number; signal: AbortSignal }): Promise<ChildSpend | undefined>;
}

/** What a child turn spent, as the caller counts it (see {@link AgentCaller.spent}). */
export interface ChildSpend {
  readonly child: { readonly sessionId: string; readonly turnId: string };
  readonly usage: Usage;
  readonly cost: number;
  /** True when read from the child's `turn.ended`; false when summed from its log before it ended. */
  readonly ended: boolean;
}

/** The usage and cost a turn's log events show so far: its provider and summary calls and its own agent calls. */
export function spentSoFar(events: readonly LogEvent[], turnId: string): { usage: Usage; cost: number } {
  let usage: Usage = ZERO_USAGE;
  let cost = 0;
  for (const event of events) {
    if (event.turnId !== turnId) continue;
    if (event.type === LogEventType.assistantMessage) {
      usage = addUsage(usage, event.data.usage);
      cost += event.data.cost;
    } else if (event.type === LogEventType.summaryCreated || event.type === LogEventType.toolResult) {
      if (event.data.usage) usage = addUsage(usage, event.data.usage);
      cost += event.data.cost ?? 0;
    }
  }
  return { usage, cost };
}

const promptReplySchema = z.object({
  accepted: z.boolean(),
  sessionId: z.string().optional(),
  turnId: z.string().optional(),
  error: z.object({ code: z.string(), message: z.string(), retryable: z.boolean() }).optional(),
});

/** Options of {@link createAgentCaller}. */
export interface AgentCallerOptions {
  readonly nc: NatsConnection;
  readonly codec: Codec;
  readonly subjects: Subjects;
  readonly log: SessionLog;
  readonly logger: Logger;
  /** Longest wait for the child's prompt to be accepted. Default 15 s. */
  readonly promptTimeoutMs?: number;
  /** How often the child's log is read for its end while it runs. Default 200 ms. */
  readonly pollMs?: number;
  readonly replies?: ReplyMux;
}

/** The answer of a child turn's `turn.ended`, as the calling tool's result. */
export function resultOfChild(ended: Extract<LogEvent, { type: 'turn.ended' }>, sessionId: string): AgentCallResult {
  const { data } = ended;
  const child = { sessionId, turnId: ended.turnId ?? '' };
  const spent = { usage: data.usage, cost: data.cost };
  if (data.reason === TurnEndReason.yielded) return { output: data.text ?? '', child, ...spent };
  const error: ErrorData = data.error ?? { code: data.reason, message: `the agent's turn ended ${data.reason}`, retryable: false };
  const partial = data.text ? `; its last text: ${data.text}` : '';
  return { output: `${error.code}: ${error.message}${partial}`, error, child, ...spent };
}

/** An abortable pause. */
function pause(ms: number, signal: AbortSignal): Promise<void> {
  return new Promise((resolve, reject) => {
    if (signal.aborted) return reject(abortReason(signal));
    const onAbort = () => {
      clearTimeout(timer);
      reject(abortReason(signal));
    };
    const timer = setTimeout(() => {
      signal.removeEventListener('abort', onAbort);
      resolve();
    }, ms);
    signal.addEventListener('abort', onAbort, { once: true });
  });
}

/**
 * Creates the runtime's agent caller: child sessions are prompted on the bus (`agentbus.<t>.sessions.<child>.prompt`
 * with `profile`, `parent` and the capped budgets), followed through their log until their turn ends, and
 * cancelled (`….cancel`) when the calling turn is.
 */
export function createAgentCaller(options: AgentCallerOptions): AgentCaller {
  const { nc, codec, subjects, log, logger } = options;
  const promptTimeoutMs = options.promptTimeoutMs ?? 15_000;
  const pollMs = options.pollMs ?? 200;
  let replies = options.replies;

  /** The child's turn started by this call, found in its log (a call resumed after a failover), and how far read. */
  async function findStarted(tenant: string, sessionId: string, effectId: string, signal: AbortSignal) {
    const read = await log.read(tenant, sessionId, { signal });
    const prompt = read.events.find((event) => event.type === LogEventType.userMessage && event.data.parent?.effectId === effectId);
    return { turnId: prompt?.turnId, events: read.events, lastSeq: read.lastSeq };
  }

  async function prompt(call: AgentCallRequest, sessionId: string, signal: AbortSignal): Promise<string> {
    const { profile, budget } = call;
    const body: Prompt = {
      text: call.task,
      profile: profile.name,
      parent: call.parent,
      maxSteps: budget.maxSteps,
      deadlineMs: budget.deadlineMs,
      ...(budget.maxCost === undefined ? {} : { maxCost: budget.maxCost }),
      ...(profile.model === undefined ? {} : { model: profile.model }),
    };
    replies ??= createReplyMux(nc);
    const subject = subjects.session(call.tenant, sessionId, SessionVerb.prompt);
    const message = await request(nc, subject, codec.encode(body), { timeoutMs: promptTimeoutMs, signal, headers: msgpackHeaders(), replies });
    const reply = codec.decodeAs(promptReplySchema, message.data, contentTypeOf(message));
    if (!reply.accepted || !reply.turnId) {
      const error = reply.error ?? { code: ErrorCode.internal, message: 'the child prompt was not accepted', retryable: false };
      throw Object.assign(new Error(error.message), { code: error.code, retryable: error.retryable });
    }
    return reply.turnId;
  }

  function cancelChild(tenant: string, sessionId: string, reason: string): void {
    try {
      nc.publish(subjects.session(tenant, sessionId, SessionVerb.cancel), codec.encode({ reason }), { headers: msgpackHeaders() });
    } catch (err) {
      logger.warn({ err, tenant, sessionId }, 'the child session could not be sent its cancel');
    }
  }

  return {
    async call(call, { signal }) {
      const sessionId = childSessionId(call.parent.effectId);
      let turnId: string | undefined;
      {
        const found = await findStarted(call.tenant, sessionId, call.parent.effectId, signal);
        let lastSeq = found.lastSeq;
        let events: readonly LogEvent[] = found.events;
        if (found.turnId) turnId = found.turnId;
        else {
          try {
            turnId = await prompt(call, sessionId, signal);
          } catch (err) {
            if (signal.aborted) throw err;
            return { output: `agent ${call.profile.name} could not be started: ${(err as Error).message}`, error: toErrorData(err) };
          }
        }
        for (;;) {
          const ended = events.find((event): event is Extract<LogEvent, { type: 'turn.ended' }> => event.type === LogEventType.turnEnded && event.turnId === turnId);
          if (ended) return resultOfChild(ended, sessionId);
          await pause(pollMs, signal);
          const read = await log.read(call.tenant, sessionId, { signal, after: lastSeq });
          events = read.events;
          lastSeq = read.lastSeq;
        }
      }
    },
    cancel: (tenant, effectId, reason) => cancelChild(tenant, childSessionId(effectId), reason),
    async spent(tenant, effectId, { waitMs, signal }) {
      const sessionId = childSessionId(effectId);
      const found = await findStarted(tenant, sessionId, effectId, signal);
      const { turnId } = found;
      if (!turnId) return undefined;
      const events = [...found.events];
      let lastSeq = found.lastSeq;
      const until = Date.now() + waitMs;
      for (;;) {
        const ended = events.find((event): event is Extract<LogEvent, { type: 'turn.ended' }> => event.type === LogEventType.turnEnded && event.turnId === turnId);
        if (ended) return { child: { sessionId, turnId }, usage: ended.data.usage, cost: ended.data.cost, ended: true };
        if (Date.now() >= until) return { child: { sessionId, turnId }, ...spentSoFar(events, turnId), ended: false };
        await pause(Math.min(pollMs, Math.max(0, until - Date.now())), signal);
        const read = await log.read(tenant, sessionId, { signal, after: lastSeq });
        events.push(...read.events);
        lastSeq = read.lastSeq;
      }
    },
  };
}
