import { nuid } from '@nats-io/nats-core';
import type { Msg, MsgHdrs, NatsConnection, Subscription } from '@nats-io/nats-core';
import { createServiceRegistration } from '../../src/bus/service-registry.ts';
import type { ServiceRegistration } from '../../src/bus/service-registry.ts';
import type { ReplyPolicy } from '../../src/bus/reply-guard.ts';
import type { AgentbusClient } from '../../src/client/index.ts';
import { AgentbusError } from '../../src/errors.ts';
import type { Logger } from '../../src/logging.ts';
import type { RefusalLog } from '../../src/refusal-log.ts';
import { relayedTraceContext } from '../../src/telemetry/index.ts';
import type { Codec } from '../../src/protocol/index.ts';
import { createTurnRunner } from './agentbus-turn.ts';
import type { AgentsConfig, ExposedAgent } from './config.ts';
import { buildHeartbeat } from './heartbeat.ts';
import { handlePrompt } from './prompt-handler.ts';
import { isCallerReply } from './reply-subject.ts';
import { askCaller } from './caller-query.ts';
import { createResponseStream } from './response-stream.ts';
import type { ResponseStream } from './response-stream.ts';
import { AGENTS_QUEUE_GROUP, AGENTS_SERVICE, AGENT_PROTOCOL_VERSION, AgentStatus, AgentVerb, agentSubject, errorMessage, formatPayloadSize, parsePayloadSize, TERMINATOR } from './wire.ts';

/** Collaborators of one agent host. */
export interface AgentHostOptions {
  readonly nc: NatsConnection;
  readonly logger: Logger;
  readonly client: AgentbusClient;
  readonly codec: Codec;
  readonly agent: ExposedAgent;
  readonly settings: Omit<AgentsConfig, 'agents'>;
  /** The harness's version, announced on `$SRV` (semver). */
  readonly version: string;
  /** The server's max_payload: `max_payload` is never announced above it. */
  readonly serverMaxPayload: number;
  /** Prompts handled at once; more get a 429. */
  readonly maxConcurrentPrompts: number;
  /** Inbox prefixes answered beside `_INBOX.` and `_R_.` (`AGENTBUS_TRUSTED_INBOXES`). */
  readonly trustedInboxes: readonly string[];
  readonly refusals: Pick<RefusalLog, 'refused'>;
  readonly now?: () => number;
}

/** One exposed agent on the bus: its `agents` registration, endpoints and heartbeat. */
export interface AgentHost {
  readonly registration: ServiceRegistration;
  /** Stops heartbeats and endpoints, ends every open stream (500, terminator), then leaves `$SRV`. */
  stop(): Promise<void>;
}

/**
 * Starts one agent of the Synadia Agent Protocol 0.3 for an agentbus session: registers the micro service `agents`
 * (metadata `agent`, `owner`, `protocol_version`, `session` when bound), serves `prompt` and `status` in queue group
 * `agents`, and publishes its heartbeat on `agents.hb.{agent}.{owner}.{name}`, the first right after registering.
 */
export function startAgentHost(options: AgentHostOptions): AgentHost {
  const { nc, agent, settings, logger } = options;
  const now = options.now ?? Date.now;
  const configured = agent.maxPayload === undefined ? options.serverMaxPayload : parsePayloadSize(agent.maxPayload)!;
  const limits = { maxPayloadBytes: Math.min(configured, options.serverMaxPayload), attachmentsOk: agent.attachments };
  const subjects = { prompt: agentSubject(AgentVerb.prompt, agent), status: agentSubject(AgentVerb.status, agent), heartbeat: agentSubject(AgentVerb.heartbeat, agent) };
  const log = logger.child({ agent: `${agent.agent}.${agent.owner}.${agent.name}` });
  const replyPolicy: ReplyPolicy = { open: true, trusted: options.trustedInboxes };
  const registration = createServiceRegistration(
    nc,
    {
      name: AGENTS_SERVICE,
      version: options.version,
      description: agent.description ?? `agentbus agent ${agent.name} (tenant ${agent.tenant})`,
      metadata: { agent: agent.agent, owner: agent.owner, protocol_version: AGENT_PROTOCOL_VERSION, ...(agent.session ? { session: agent.session } : {}) },
      endpoints: [
        { name: AgentVerb.prompt, subject: subjects.prompt, queueGroup: AGENTS_QUEUE_GROUP, metadata: { max_payload: formatPayloadSize(limits.maxPayloadBytes), attachments_ok: String(limits.attachmentsOk) } },
        { name: AgentVerb.status, subject: subjects.status, queueGroup: AGENTS_QUEUE_GROUP },
      ],
    },
    { logger: log, replyPolicy },
  );
  const heartbeat = () => buildHeartbeat(agent, registration.id, settings.heartbeatIntervalS, now());
  const runTurn = createTurnRunner({
    client: options.client,
    agent,
    logger: log,
    newSessionId: () => `agents-${nuid.next()}`,
    turnTimeoutMs: settings.turnTimeoutMs,
    readyTimeoutMs: settings.readyTimeoutMs,
    queryTimeoutMs: settings.queryTimeoutMs,
  });
  // A §7 query: one reply subject per query (§7.3), answered by the caller's one message or by nothing in time.
  const ask = (stream: ResponseStream, question: string, signal: AbortSignal) =>
    askCaller({ nc, codec: options.codec, stream, question, signal, timeoutMs: settings.queryTimeoutMs, maxPayloadBytes: limits.maxPayloadBytes, logger: log });
  const stopping = new AbortController();
  const open = new Set<Promise<unknown>>();
  const encoder = new TextEncoder();

  const admitted = (message: Msg): message is Msg & { reply: string } => {
    if (isCallerReply(message.reply, options.trustedInboxes)) return true;
    options.refusals.refused({ code: 'reply_refused', message: 'reply subject is under no caller inbox (_INBOX.)', subject: message.subject, reply: String((message as Msg).reply ?? "").slice(0, 200) });
    return false;
  };
  const publishTo = (reply: string) => (data: Uint8Array, headers?: MsgHdrs) => nc.publish(reply, data, headers ? { headers } : undefined);

  const onPrompt = (message: Msg) => {
    if (!admitted(message)) return;
    const started = now();
    const stream = createResponseStream(publishTo(message.reply), { keepaliveMs: settings.keepaliveIntervalS * 1000 });
    if (open.size >= options.maxConcurrentPrompts || stopping.signal.aborted) {
      const failure = stopping.signal.aborted
        ? { status: AgentStatus.internal, error: 'unavailable', message: 'the agent host is stopping' }
        : { status: AgentStatus.tooManyRequests, error: 'too_many_prompts', message: `this agent runs at most ${options.maxConcurrentPrompts} prompts at once` };
      stream.fail(failure);
      stream.end();
      registration.record(AgentVerb.prompt, { durationMs: 0, error: failure.message });
      return;
    }
    const trace = relayedTraceContext(message.headers);
    const handled = handlePrompt(message.data, stream, { codec: options.codec, limits, runTurn, ask, logger: log, signal: stopping.signal, ...(trace ? { trace } : {}) }).then((failure) => {
      registration.record(AgentVerb.prompt, { durationMs: now() - started, ...(failure ? { error: failure.message } : {}) });
    });
    open.add(handled);
    void handled.finally(() => open.delete(handled));
  };

  const onStatus = (message: Msg) => {
    if (!admitted(message)) return;
    const started = now();
    try {
      nc.publish(message.reply, encoder.encode(JSON.stringify(heartbeat())));
      registration.record(AgentVerb.status, { durationMs: now() - started });
    } catch (error) {
      // §8.7.1: a payload that cannot be built is a 500, not silence.
      const failure = { status: AgentStatus.internal, error: 'internal', message: error instanceof Error ? error.message : String(error) };
      const { data, headers } = errorMessage(failure);
      nc.publish(message.reply, data, { headers });
      nc.publish(message.reply, TERMINATOR);
      registration.record(AgentVerb.status, { durationMs: now() - started, error: failure.message });
    }
  };

  const subscribe = (subject: string, handler: (message: Msg) => void): Subscription =>
    nc.subscribe(subject, {
      queue: AGENTS_QUEUE_GROUP,
      callback: (error, message) => {
        if (error) log.warn({ err: error, subject }, 'agent endpoint subscription failed');
        else handler(message);
      },
    });
  const subscriptions = [subscribe(subjects.prompt, onPrompt), subscribe(subjects.status, onStatus)];

  const beat = () => {
    try {
      nc.publish(subjects.heartbeat, encoder.encode(JSON.stringify(heartbeat())));
    } catch (error) {
      log.warn({ err: error }, 'agent heartbeat not published');
    }
  };
  beat();
  const heartbeats = setInterval(beat, settings.heartbeatIntervalS * 1000);
  log.info({ subject: subjects.prompt, instanceId: registration.id, tenant: agent.tenant, session: agent.session }, 'agent protocol host serving');

  let stopped: Promise<void> | undefined;
  return {
    registration,
    stop() {
      stopped ??= (async () => {
        clearInterval(heartbeats);
        if (!nc.isClosed()) await Promise.allSettled(subscriptions.map((subscription) => subscription.drain()));
        stopping.abort(new AgentbusError('unavailable', 'the agent host stopped before the turn ended'));
        await Promise.allSettled([...open]);
        await registration.stop();
      })();
      return stopped;
    },
  };
}
