import type { Msg, NatsConnection, Subscription } from '@nats-io/nats-core';
import { CancelledError, ErrorCode, InvalidInputError, toErrorData } from '../errors.ts';
import { createRefusalLog } from '../refusal-log.ts';
import type { Logger } from '../logging.ts';
import { contentTypeOf, SafetyTier, ToolCallHeader, ToolWorkerMetadataKey, toolCallRequestSchema } from '../protocol/index.ts';
import type { CancelAck, CancelRequest, Codec, Subjects, ToolCallReply, ToolCallRequest } from '../protocol/index.ts';
import { abortPromise, msgpackHeaders } from '../bus/request.ts';
import { createReplyMux } from '../bus/reply-mux.ts';
import type { ReplyMux } from '../bus/reply-mux.ts';
import { createReplyGuard, replyPolicyOf } from '../bus/reply-guard.ts';
import { NO_REPLY, serveCancelEndpoint } from '../bus/serve-endpoint.ts';
import type { ReplyPolicy } from '../bus/reply-guard.ts';
import { createServiceRegistration } from '../bus/service-registry.ts';
import { createStateClient } from '../bus/state-client.ts';
import type { ServiceRegistration } from '../bus/service-registry.ts';
import { createCallHeartbeats } from './call-heartbeats.ts';
import { createCallRegistry } from './call-registry.ts';
import { createConcurrencyGate } from './concurrency-gate.ts';
import type { AnyToolDefinition } from './define-tool.ts';
import { settleCall } from './call-outcome.ts';
import type { CallOutcome } from './call-outcome.ts';
import { errorReply } from './execute-tool-call.ts';
import { createScrubber } from '../scrub/index.ts';
import type { Scrubber } from '../scrub/index.ts';
import { createResultLedger } from './result-ledger.ts';
import type { ResultLedger } from './result-ledger.ts';
import { toToolMetadata } from './tool-metadata.ts';
import { traceToolServed } from '../telemetry/index.ts';

/** The service name tool workers register under unless told otherwise. */
export const DEFAULT_TOOL_SERVICE_NAME = 'agentbus-tools';

/** Options of {@link createToolWorker}. */
export interface ToolWorkerOptions {
  readonly nc: NatsConnection;
  readonly subjects: Subjects;
  readonly codec: Codec;
  readonly logger: Logger;
  readonly tools: readonly AnyToolDefinition[];
  /** The `$SRV` service name; default `agentbus-tools`. */
  readonly serviceName?: string;
  /** Semver version announced on `$SRV`. */
  readonly version: string;
  readonly description?: string;
  /** Extra service metadata (strings). */
  readonly metadata?: Readonly<Record<string, string>>;
  /** Health figures for the `data` of the worker's `$SRV.STATS` answer (see `startServiceHealth`). */
  readonly statsData?: () => Record<string, unknown>;
  /** Calls run at once across all tools; more wait in the subscription buffers. Default 64. */
  readonly maxConcurrency?: number;
  /**
   * Calls accepted and waiting for a slot (they get heartbeats); past this many a call is answered at once with a
   * retryable `busy` (it never started), rather than left unread where no heartbeat would tell its caller that
   * this worker lives. Default 1024.
   */
  readonly maxQueued?: number;
  /** How long `stop()` lets running calls finish before aborting them. Default 5000 ms. */
  readonly stopGraceMs?: number;
  /** Milliseconds between heartbeats of a running call whose caller asked for them (announced on `$SRV`). Default 1000. */
  readonly heartbeatMs?: number;
  /**
   * Where outcomes of side-effecting and privileged calls are recorded by `effectId`, and repeats answered from;
   * by default the bus's ledger bucket (`AGENTBUS_LEDGER`, made by the runtime). `false`: no ledger, and the
   * worker does not announce one.
   */
  readonly ledger?: ResultLedger | false;
  /**
   * Scrubs what the ledger keeps (tool output is stored nowhere unscrubbed) and the last error `$SRV.STATS` tells; by
   * default one of the worker's own, without configured secrets: a host passes one made with `secretsFromEnv`.
   */
  readonly scrubber?: Pick<Scrubber, 'scrub'> & Partial<Pick<Scrubber, 'scrubSync'>>;
  readonly now?: () => number;
  readonly newId?: () => string;
  /**
   * Which reply subjects calls, cancels and `$SRV` requests are answered on (see `checkReply`): a host's `main.ts`
   * passes `replyPolicyFromBus`; by default it is read from the connection.
   */
  readonly replyPolicy?: ReplyPolicy;
}

/** A running tool worker. */
export interface ToolWorker {
  /** Subscribes every tool and announces them on `$SRV`; resolves once the server has the subscriptions. */
  start(options?: { signal?: AbortSignal }): Promise<void>;
  /**
   * Leaves discovery, stops taking calls, lets running calls finish for the grace period (`graceMs`, else the
   * worker's `stopGraceMs`), then aborts the rest (they reply `cancelled`). Calls still buffered then get a retryable `no_responders` reply.
   */
  stop(options?: { signal?: AbortSignal; graceMs?: number }): Promise<void>;
  /** The `$SRV` instance id, once started. */
  readonly id: string | undefined;
  /** Calls running or waiting for a slot. */
  readonly activeCalls: number;
}

interface AcceptedCall {
  readonly tool: AnyToolDefinition;
  readonly message: Msg;
  readonly request: ToolCallRequest;
  readonly controller: AbortController;
  readonly started: number;
  /** 1 for a first attempt; more for a repeat of the same `effectId`. */
  readonly attempt: number;
  /** The caller asked for the output as scrubbed text (`Agentbus-Scrub-Output`). */
  readonly scrubOutput: boolean;
}

/** The attempt a call says it is (`Agentbus-Attempt`); a missing or malformed header is a first attempt. */
function attemptOf(message: Msg): number {
  const value = Number(message.headers?.get(ToolCallHeader.attempt) || 1);
  return Number.isInteger(value) && value >= 1 ? value : 1;
}

/**
 * Creates a worker that serves tools on the bus: each tool on `subjects.toolCall(name)` in queue group
 * `subjects.toolQueue(name)` (so more workers add capacity), with cancels on `subjects.toolCancel(name)`,
 * announced through the NATS services API with the tool's description, JSON Schema, tier, timeout and
 * idempotency as endpoint metadata.
 *
 * @example
 * const worker = createToolWorker({ nc, subjects, codec, logger, tools: [echo], version: '0.1.0' });
 * await worker.start({ signal });
 * // later
 * await worker.stop();
 */
export function createToolWorker(options: ToolWorkerOptions): ToolWorker {
  const { nc, subjects, codec } = options;
  const now = options.now ?? Date.now;
  const logger = options.logger.child({ component: 'tool-worker' });
  // Malformed cancels are expected; a flood of them must not become a flood of log lines.
  const refusals = createRefusalLog({ logger, what: 'tool message refused' });
  const replyPolicy = options.replyPolicy ?? replyPolicyOf(nc);
  const replies = createReplyGuard({ policy: replyPolicy, refusals });
  const gate = createConcurrencyGate(options.maxConcurrency ?? 64);
  const maxQueued = options.maxQueued ?? 1024;
  const calls = createCallRegistry();
  const heartbeatMs = options.heartbeatMs ?? 1000;
  const beats = createCallHeartbeats({ nc, codec, logger, intervalMs: heartbeatMs, now });
  const ledger = options.ledger === false ? undefined : (options.ledger ?? createResultLedger({ nc, codec, logger, prefix: subjects.prefix }));
  // Read-only calls have no effect to record.
  const ledgered = (tool: AnyToolDefinition) => ledger !== undefined && tool.tier !== SafetyTier.readOnly;
  // Made on the first outcome recorded: a worker of read-only tools never builds secretlint's rules.
  let ownScrubber: Scrubber | undefined;
  const own: Pick<Scrubber, 'scrub' | 'scrubSync'> = {
    scrub: (text) => (ownScrubber ??= createScrubber()).scrub(text),
    scrubSync: (text) => (ownScrubber ??= createScrubber()).scrubSync(text),
  };
  // A scrubber of the caller's without a synchronous pass (an older SDK user's) is helped out by the worker's own.
  const given = options.scrubber;
  const scrubber: Pick<Scrubber, 'scrub' | 'scrubSync'> = given
    ? { scrub: (text) => given.scrub(text), scrubSync: (text) => (given.scrubSync ? given.scrubSync(text) : own.scrubSync(text)) }
    : own;
  // A call is held by its id and its owner: ids are per attempt and fleet-unique, and an older runtime's reused
  // model ids (`call_0`) of two sessions still never meet.
  const callKey = (tool: string, request: ToolCallRequest) => `${tool}\u0000${request.tenant}\u0000${request.sessionId}\u0000${request.callId}`;
  const ownerOf = (request: ToolCallRequest) => ({ tenant: request.tenant, sessionId: request.sessionId });
  // Tools' state requests share one reply subscription, made on the first.
  let stateReplies: ReplyMux | undefined;
  const stateFor = (tenant: string) => createStateClient({ nc, codec, tenant, prefix: subjects.prefix, replies: (stateReplies ??= createReplyMux(nc)) });
  const names = new Set<string>();
  for (const tool of options.tools) {
    if (names.has(tool.name)) throw new InvalidInputError(`tool ${tool.name} is defined twice`);
    names.add(tool.name);
  }

  let registration: ServiceRegistration | undefined;
  const callSubscriptions: Subscription[] = [];
  const cancelSubscriptions: Subscription[] = [];
  const loops: Promise<void>[] = [];
  const running = new Set<Promise<void>>();
  let state: 'idle' | 'running' | 'stopping' | 'stopped' = 'idle';
  // Set when the grace period is over: buffered calls are refused instead of run.
  let refusing = false;
  let stopped: Promise<void> | undefined;

  // nats.js encodes headers at publish: one object of each kind serves every reply.
  const replyHeaders = msgpackHeaders();
  const scrubbedReplyHeaders = msgpackHeaders();
  scrubbedReplyHeaders.set(ToolCallHeader.outputScrubbed, '1');

  function reply(call: { tool: AnyToolDefinition; message: Msg; started: number; request?: ToolCallRequest }, body: ToolCallReply, scrubbed = false): void {
    if (call.request) beats.remove(callKey(call.tool.name, call.request));
    traceToolServed(call.message.headers, call.tool.name, call.request, body, call.started);
    registration?.record(call.tool.name, {
      durationMs: now() - call.started,
      ...(body.ok ? {} : { error: `${body.error.code}: ${body.error.message}` }),
    });
    try {
      call.message.respond(codec.encode(body), { headers: scrubbed ? scrubbedReplyHeaders : replyHeaders });
    } catch (err) {
      logger.warn({ err, tool: call.tool.name }, 'could not send a tool reply');
    }
  }

  function decodeRequest(tool: AnyToolDefinition, message: Msg, started: number): ToolCallRequest | undefined {
    let raw: unknown;
    try {
      raw = codec.decode(message.data, contentTypeOf(message));
      return codec.validate(toolCallRequestSchema, raw, 'tool call');
    } catch (error) {
      const data = toErrorData(error);
      const callId = typeof raw === 'object' && raw !== null && 'callId' in raw && typeof raw.callId === 'string' ? raw.callId : '';
      const code = data.code === ErrorCode.payloadTooLarge ? data.code : ErrorCode.invalidInput;
      reply({ tool, message, started }, errorReply(callId, { ...data, code, retryable: false }));
      return undefined;
    }
  }

  /** Decodes a call, waits for a slot and starts it; answers at once what cannot run. */
  async function accept(tool: AnyToolDefinition, message: Msg): Promise<void> {
    const started = now();
    if (!message.reply) {
      logger.warn({ tool: tool.name }, 'dropped a tool call without a reply subject');
      return;
    }
    // Heartbeats, progress and the result all go to this reply subject: it must be an inbox the caller may own.
    if (!replies.admits(message)) return;
    const request = decodeRequest(tool, message, started);
    if (!request) return;
    const base = { tool, message, started, request };
    if (refusing) {
      reply(base, errorReply(request.callId, { code: ErrorCode.noResponders, message: 'the tool worker stopped before running the call', retryable: true }));
      return;
    }
    if (gate.waiting >= maxQueued) {
      // Shed, not left unread: a caller that counts on heartbeats would take an unread call for a lost one.
      const message = `the tool worker has ${gate.waiting} calls waiting for a slot; it did not start this one`;
      reply(base, errorReply(request.callId, { code: ErrorCode.busy, message, retryable: true }));
      return;
    }
    const controller = calls.open(tool.name, request.callId, ownerOf(request));
    if (!controller) {
      reply(base, errorReply(request.callId, toErrorData(new CancelledError('cancelled before it started'))));
      return;
    }
    // From here the caller hears from this worker while the call waits for a slot and while it runs.
    if (message.headers?.get(ToolCallHeader.heartbeat) === '1') beats.add(callKey(tool.name, request), { reply: message.reply, callId: request.callId });
    let release: () => void;
    try {
      release = await gate.acquire({ signal: controller.signal });
    } catch (error) {
      // Only an abort (cancel or stop) rejects the wait for a slot. A call the stopping worker never started
      // may be sent again to another.
      calls.close(tool.name, request.callId, controller);
      const notStarted = { code: ErrorCode.noResponders, message: 'the tool worker stopped before running the call', retryable: true };
      reply(base, errorReply(request.callId, refusing ? notStarted : toErrorData(error)));
      return;
    }
    void run({ ...base, controller, attempt: attemptOf(message), scrubOutput: message.headers?.get(ToolCallHeader.scrubOutput) === '1' }, release);
  }

  /** The outcome of a call (see {@link settleCall}): from the ledger, or by running the tool and recording it. */
  function outcome(call: AcceptedCall): Promise<CallOutcome> {
    const { tool, request } = call;
    const key = callKey(tool.name, request);
    return settleCall(
      { tool, request, signal: call.controller.signal, attempt: call.attempt, scrubOutput: call.scrubOutput },
      {
        ledger: ledgered(tool) ? ledger : undefined,
        scrubber,
        logger,
        now,
        stateFor,
        onProgress: (update) => beats.progress(key, update),
        workerId: () => registration?.id,
      },
    );
  }

  function run(call: AcceptedCall, release: () => void): Promise<void> {
    const task = (async () => {
      try {
        let settled: CallOutcome;
        try {
          settled = await outcome(call);
        } catch (error) {
          // outcome() answers every failure of the tool; this is a defect of the worker itself. The caller still
          // gets a reply (and stops hearing heartbeats), and the process lives on.
          logger.error({ err: error, tool: call.tool.name, callId: call.request.callId }, 'a tool call failed inside the worker');
          settled = { body: errorReply(call.request.callId, { code: ErrorCode.internal, message: `the worker of ${call.tool.name} failed: ${error instanceof Error ? error.message : String(error)}`, retryable: false }) };
        }
        // The record went out first; its acknowledgement is awaited after the reply, not before it.
        reply(call, settled.body, settled.scrubbed === true);
        await settled.recording;
      } finally {
        calls.close(call.tool.name, call.request.callId, call.controller);
        release();
      }
    })();
    running.add(task);
    void task.finally(() => running.delete(task));
    return task;
  }

  async function serve(tool: AnyToolDefinition, subscription: Subscription): Promise<void> {
    try {
      for await (const message of subscription) {
        // Accepted calls wait for a slot in the gate, with heartbeats; past maxQueued of them a call is shed.
        const admitted = accept(tool, message).catch((err: unknown) => logger.error({ err, tool: tool.name }, 'a tool call was not accepted'));
        // stop() waits for calls still waiting for a slot as for running ones.
        running.add(admitted);
        void admitted.finally(() => running.delete(admitted));
      }
    } catch (err) {
      logger.error({ err, tool: tool.name }, 'tool subscription failed');
    }
  }

  /** Cancels a call this worker runs; every worker hears the cancel, the one running the call answers. */
  function cancel(tool: AnyToolDefinition, request: CancelRequest): CancelAck | typeof NO_REPLY {
    const { id } = request;
    // A runtime's cancel names the call's tenant and session: it reaches no other owner's call of that id.
    const scope = { ...(request.tenant === undefined ? {} : { tenant: request.tenant }), ...(request.sessionId === undefined ? {} : { sessionId: request.sessionId }) };
    if (!calls.cancel(tool.name, id, new CancelledError(`call ${id} cancelled by the caller`), scope)) return NO_REPLY;
    logger.debug({ tool: tool.name, callId: id }, 'cancelled a tool call');
    return { v: 1, id, cancelled: true };
  }

  async function start(startOptions: { signal?: AbortSignal } = {}): Promise<void> {
    startOptions.signal?.throwIfAborted();
    if (state !== 'idle') throw new InvalidInputError(`tool worker cannot start: it is ${state}`);
    state = 'running';
    for (const tool of options.tools) {
      const subscription = nc.subscribe(subjects.toolCall(tool.name), { queue: subjects.toolQueue(tool.name) });
      callSubscriptions.push(subscription);
      loops.push(serve(tool, subscription));
      cancelSubscriptions.push(
        serveCancelEndpoint({ nc, codec, logger, replies, refusals, name: `${tool.name}-cancel`, subject: subjects.toolCancel(tool.name), cancel: (request) => cancel(tool, request) }),
      );
    }
    registration = createServiceRegistration(
      nc,
      {
        name: options.serviceName ?? DEFAULT_TOOL_SERVICE_NAME,
        version: options.version,
        description: options.description ?? 'agentbus tool worker',
        metadata: { prefix: subjects.prefix, ...options.metadata },
        endpoints: options.tools.map((tool) => ({
          name: tool.name,
          subject: subjects.toolCall(tool.name),
          queueGroup: subjects.toolQueue(tool.name),
          metadata: {
            ...toToolMetadata(tool),
            [ToolWorkerMetadataKey.heartbeatMs]: String(heartbeatMs),
            ...(ledgered(tool) ? { [ToolWorkerMetadataKey.ledger]: 'true' } : {}),
          },
        })),
      },
      { logger, now, scrub: scrubber.scrubSync, replyPolicy, ...(options.newId ? { newId: options.newId } : {}), ...(options.statsData ? { statsData: options.statsData } : {}) },
    );
    const { promise: aborted, cleanup } = abortPromise(startOptions.signal);
    try {
      await Promise.race([nc.flush(), aborted]);
    } finally {
      cleanup();
    }
    logger.info({ tools: [...names], id: registration.id }, 'tool worker started');
  }

  async function stopNow(stopOptions: { signal?: AbortSignal; graceMs?: number }): Promise<void> {
    if (state !== 'running') {
      state = 'stopped';
      return;
    }
    state = 'stopping';
    await registration?.stop();
    const closed = nc.isClosed();
    const drains = closed ? [] : callSubscriptions.map((subscription) => subscription.drain());
    const grace = stopOptions.graceMs ?? options.stopGraceMs ?? 5000;
    let timer: ReturnType<typeof setTimeout> | undefined;
    const { promise: aborted, cleanup } = abortPromise(stopOptions.signal);
    await Promise.race([
      Promise.allSettled([...loops, ...running]),
      new Promise((resolve) => (timer = setTimeout(resolve, grace))),
      aborted.catch(() => undefined),
    ]);
    clearTimeout(timer);
    cleanup();
    refusing = true;
    calls.abortAll(new CancelledError('the tool worker stopped'));
    if (closed) for (const subscription of callSubscriptions) subscription.unsubscribe();
    await Promise.allSettled([...loops, ...running]);
    for (const subscription of cancelSubscriptions) if (!subscription.isClosed()) subscription.unsubscribe();
    refusals.close();
    beats.stop();
    const results = await Promise.allSettled(drains);
    for (const result of results) if (result.status === 'rejected') logger.warn({ err: result.reason }, 'tool subscription drain failed');
    state = 'stopped';
    logger.info({ id: registration?.id }, 'tool worker stopped');
  }

  return {
    start,
    stop(stopOptions = {}) {
      stopped ??= stopNow(stopOptions);
      return stopped;
    },
    get id() {
      return registration?.id;
    },
    get activeCalls() {
      return calls.size;
    },
  };
}
