import type { Msg, NatsConnection, Subscription } from '@nats-io/nats-core';
import { CancelledError, ErrorCode, InvalidInputError, toErrorData } from '../errors.ts';
import type { ErrorData } from '../errors.ts';
import type { Logger } from '../logging.ts';
import { contentTypeOf, HookPhase, afterHookRequestSchema, beforeHookRequestSchema } from '../protocol/index.ts';
import type { Codec, Subjects } from '../protocol/index.ts';
import { abortPromise, msgpackHeaders } from '../bus/request.ts';
import { createRefusalLog } from '../refusal-log.ts';
import { createReplyGuard, replyPolicyOf } from '../bus/reply-guard.ts';
import type { ReplyPolicy } from '../bus/reply-guard.ts';
import { createServiceRegistration } from '../bus/service-registry.ts';
import type { ServiceRegistration } from '../bus/service-registry.ts';
import { createConcurrencyGate } from './concurrency-gate.ts';
import { hookFailureReply, runHook } from './run-hook.ts';
import type { AfterHookHandler, BeforeHookHandler, HookJob, HookReplyBody } from './run-hook.ts';
import type { Scrubber } from '../scrub/index.ts';

/** The service name hook workers register under unless told otherwise. */
export const DEFAULT_HOOK_SERVICE_NAME = 'agentbus-hooks';

/** Options of {@link createHookWorker}. */
export interface HookWorkerOptions {
  readonly nc: NatsConnection;
  readonly subjects: Subjects;
  readonly codec: Codec;
  readonly logger: Logger;
  /** The hook's name, as the runtime's `AGENTBUS_TOOL_HOOKS` lists it (`before:<name>`, `after:<name>`): one subject token. */
  readonly name: string;
  /** Asked before each call is sent to a worker (when the runtime lists `before:<name>`). */
  readonly before?: BeforeHookHandler;
  /** Asked with each call's result before the model sees it (when the runtime lists `after:<name>`). */
  readonly after?: AfterHookHandler;
  /** Semver version announced on `$SRV`. */
  readonly version: string;
  /** The `$SRV` service name; default `agentbus-hooks`. */
  readonly serviceName?: string;
  readonly description?: string;
  /** Extra service metadata (strings). */
  readonly metadata?: Readonly<Record<string, string>>;
  /** Requests handled at once; more wait in the subscription buffers. Default 64. */
  readonly maxConcurrency?: number;
  /** How long `stop()` lets running requests finish before aborting them. Default 5000 ms. */
  readonly stopGraceMs?: number;
  /** Scrubs the last error `$SRV.STATS` tells; by default the scrubber's fast pass without configured secrets. */
  readonly scrubber?: Pick<Scrubber, 'scrubSync'>;
  readonly now?: () => number;
  readonly newId?: () => string;
  /** Which reply subjects hook requests and `$SRV` requests are answered on (see `checkReply`); default read from the connection. */
  readonly replyPolicy?: ReplyPolicy;
}

/** A running hook worker. */
export interface HookWorker {
  /** Subscribes the hook's phases and announces them on `$SRV`; resolves once the server has the subscriptions. */
  start(options?: { signal?: AbortSignal }): Promise<void>;
  /** Leaves discovery, stops taking requests, lets running ones finish for the grace period, then aborts the rest. */
  stop(options?: { signal?: AbortSignal }): Promise<void>;
  /** The `$SRV` instance id, once started. */
  readonly id: string | undefined;
  /** Requests being handled or waiting for a slot. */
  readonly activeRequests: number;
}

/**
 * Creates a worker that serves one tool hook on the bus: `before` on `subjects.toolHook(name, 'before')` and `after`
 * on `subjects.toolHook(name, 'after')`, both in queue group `subjects.toolHookQueue(name)` (more processes of the
 * hook add capacity), announced through the NATS services API as endpoints `<name>-before` and `<name>-after`.
 * Requests may come as msgpack or JSON (by `Content-Type`); replies are msgpack.
 *
 * @example
 * const worker = createHookWorker({
 *   nc, subjects, codec, logger, name: 'policy', version: '1.0.0',
 *   before: (call) => (call.name === 'run_command' ? { action: 'block', output: 'run_command is not allowed here' } : { action: 'continue' }),
 * });
 * await worker.start();
 */
export function createHookWorker(options: HookWorkerOptions): HookWorker {
  const { nc, subjects, codec, name } = options;
  const now = options.now ?? Date.now;
  const logger = options.logger.child({ component: 'hook-worker', hook: name });
  if (!options.before && !options.after) throw new InvalidInputError(`hook ${name} has neither a before nor an after handler`);
  const phases = [
    ...(options.before ? [HookPhase.before] : []),
    ...(options.after ? [HookPhase.after] : []),
  ];
  const subjectOf = Object.fromEntries(phases.map((phase) => [phase, subjects.toolHook(name, phase)]));
  const endpointOf = (phase: HookPhase) => `${name}-${phase}`;
  const gate = createConcurrencyGate(options.maxConcurrency ?? 64);
  const replyPolicy = options.replyPolicy ?? replyPolicyOf(nc);
  const refusals = createRefusalLog({ logger, what: 'hook request refused' });
  const replies = createReplyGuard({ policy: replyPolicy, refusals });
  const stopping = new AbortController();
  const subscriptions: Subscription[] = [];
  const loops: Promise<void>[] = [];
  const running = new Set<Promise<void>>();
  let registration: ServiceRegistration | undefined;
  let state: 'idle' | 'running' | 'stopped' = 'idle';
  let stopped: Promise<void> | undefined;

  function reply(phase: HookPhase, message: Msg, started: number, body: HookReplyBody): void {
    registration?.record(endpointOf(phase), { durationMs: now() - started, ...('error' in body ? { error: `${body.error.code}: ${body.error.message}` } : {}) });
    try {
      message.respond(codec.encode(body), { headers: msgpackHeaders() });
    } catch (err) {
      logger.warn({ err, phase }, 'could not send a hook reply');
    }
  }

  function decode(phase: HookPhase, message: Msg): HookJob | { error: ErrorData; callId: string } {
    let raw: unknown;
    try {
      raw = codec.decode(message.data, contentTypeOf(message));
      if (phase === HookPhase.before) return { phase, request: codec.validate(beforeHookRequestSchema, raw, 'before hook request'), handler: options.before! };
      return { phase, request: codec.validate(afterHookRequestSchema, raw, 'after hook request'), handler: options.after! };
    } catch (error) {
      const data = toErrorData(error);
      const callId = typeof raw === 'object' && raw !== null && 'callId' in raw && typeof raw.callId === 'string' ? raw.callId : '';
      const code = data.code === ErrorCode.payloadTooLarge ? data.code : ErrorCode.invalidInput;
      return { error: { ...data, code, retryable: false }, callId };
    }
  }

  async function accept(phase: HookPhase, message: Msg): Promise<void> {
    const started = now();
    if (!message.reply) {
      logger.warn({ phase }, 'dropped a hook request without a reply subject');
      return;
    }
    if (!replies.admits(message)) return;
    const job = decode(phase, message);
    if ('error' in job) {
      reply(phase, message, started, hookFailureReply(job.callId, job.error));
      return;
    }
    let release: () => void;
    try {
      release = await gate.acquire({ signal: stopping.signal });
    } catch {
      const refusal = { code: ErrorCode.noResponders, message: 'the hook worker stopped before handling the request', retryable: true };
      reply(phase, message, started, hookFailureReply(job.request.callId, refusal));
      return;
    }
    const task = runHook(job, { signal: stopping.signal, now, logger: logger.child({ phase, callId: job.request.callId }) })
      .then((body) => reply(phase, message, started, body))
      .finally(release);
    running.add(task);
    void task.finally(() => running.delete(task));
  }

  async function serve(phase: HookPhase, subscription: Subscription): Promise<void> {
    try {
      // Waiting in accept() for a slot before pulling the next message keeps the rest queued in the subscription.
      for await (const message of subscription) await accept(phase, message);
    } catch (err) {
      logger.error({ err, phase }, 'hook subscription failed');
    }
  }

  async function start(startOptions: { signal?: AbortSignal } = {}): Promise<void> {
    startOptions.signal?.throwIfAborted();
    if (state !== 'idle') throw new InvalidInputError(`hook worker cannot start: it is ${state}`);
    state = 'running';
    for (const phase of phases) {
      const subscription = nc.subscribe(subjectOf[phase]!, { queue: subjects.toolHookQueue(name) });
      subscriptions.push(subscription);
      loops.push(serve(phase, subscription));
    }
    registration = createServiceRegistration(
      nc,
      {
        name: options.serviceName ?? DEFAULT_HOOK_SERVICE_NAME,
        version: options.version,
        description: options.description ?? `agentbus tool hook ${name}`,
        metadata: { prefix: subjects.prefix, ...options.metadata },
        endpoints: phases.map((phase) => ({
          name: endpointOf(phase),
          subject: subjectOf[phase]!,
          queueGroup: subjects.toolHookQueue(name),
          metadata: { hook: name, phase },
        })),
      },
      { logger, now, replyPolicy, ...(options.scrubber ? { scrub: options.scrubber.scrubSync } : {}), ...(options.newId ? { newId: options.newId } : {}) },
    );
    const { promise: aborted, cleanup } = abortPromise(startOptions.signal);
    try {
      await Promise.race([nc.flush(), aborted]);
    } finally {
      cleanup();
    }
    logger.info({ phases, id: registration.id }, 'hook worker started');
  }

  async function stopNow(stopOptions: { signal?: AbortSignal }): Promise<void> {
    if (state !== 'running') {
      state = 'stopped';
      return;
    }
    await registration?.stop();
    const drains = nc.isClosed() ? [] : subscriptions.map((subscription) => subscription.drain());
    let timer: ReturnType<typeof setTimeout> | undefined;
    const { promise: aborted, cleanup } = abortPromise(stopOptions.signal);
    await Promise.race([
      Promise.allSettled([...loops, ...running]),
      new Promise((resolve) => (timer = setTimeout(resolve, options.stopGraceMs ?? 5000))),
      aborted.catch(() => undefined),
    ]);
    clearTimeout(timer);
    cleanup();
    stopping.abort(new CancelledError('the hook worker stopped'));
    if (nc.isClosed()) for (const subscription of subscriptions) subscription.unsubscribe();
    await Promise.allSettled([...loops, ...running, ...drains]);
    refusals.close();
    state = 'stopped';
    logger.info({ id: registration?.id }, 'hook worker stopped');
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
    get activeRequests() {
      return running.size;
    },
  };
}
