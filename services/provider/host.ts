import { flushWrites } from '../../src/bus/coalesce-writes.ts';
import type { Msg, NatsConnection, Subscription } from '@nats-io/nats-core';
import { msgpackHeaders } from '../../src/bus/request.ts';
import { createReplyGuard, replyPolicyOf } from '../../src/bus/reply-guard.ts';
import type { ReplyPolicy } from '../../src/bus/reply-guard.ts';
import { createServiceRegistration } from '../../src/bus/service-registry.ts';
import type { EndpointOutcome, ServiceRegistration } from '../../src/bus/service-registry.ts';
import { NO_REPLY, serveCancelEndpoint, serveEndpoint } from '../../src/bus/serve-endpoint.ts';
import { AgentbusError, CancelledError, ErrorCode, InvalidInputError, ProviderError, TimeoutError, abortReason, toErrorData } from '../../src/errors.ts';
import type { ErrorData } from '../../src/errors.ts';
import type { Logger } from '../../src/logging.ts';
import { contentTypeOf, EMBED_TIMEOUT_HEADER, PROVIDER_HEARTBEAT_EVENT, PROVIDER_HEARTBEAT_MS, ProviderCallHeader, embedRequestSchema, generateRequestSchema } from '../../src/protocol/index.ts';
import type { CancelAck, Codec, EmbedReply, EmbedRequest, GenerateRequest, Subjects } from '../../src/protocol/index.ts';
import type { AdapterRequest, ProviderAdapter } from './adapter.ts';
import type { EmbedAdapter } from './embedders.ts';
import { createRefusalLog } from '../../src/refusal-log.ts';
import { createScrubber } from '../../src/scrub/index.ts';
import type { Scrubber } from '../../src/scrub/index.ts';
import { traceGenerate } from '../../src/telemetry/index.ts';
import { createChunkWriter, isTerminalChunk } from './chunk-writer.ts';
import type { ChunkWriter } from './chunk-writer.ts';

/** The `$SRV` service name provider hosts announce themselves under. */
export const PROVIDER_SERVICE_NAME = 'agentbus-provider';

/** Default longest run of one provider request. */
export const DEFAULT_REQUEST_TIMEOUT_MS = 10 * 60_000;

/** Options of {@link createProviderHost}. */
export interface ProviderHostOptions {
  readonly nc: NatsConnection;
  readonly subjects: Subjects;
  readonly codec: Codec;
  readonly logger: Logger;
  readonly adapters: readonly ProviderAdapter[];
  /**
   * Embedding models by provider name, served on `agentbus.provider.<name>.embed`. A provider without one
   * answers there with `unsupported`.
   */
  readonly embedders?: readonly EmbedAdapter[];
  /** Longest wait of one embed request; default 60 s. */
  readonly embedTimeoutMs?: number;
  /** Longest run of one request; the stream then ends with a `timeout` error chunk. Default 10 minutes. */
  readonly requestTimeoutMs?: number;
  /** How long `stop()` waits for aborted adapters to wind down. Default 5 s. */
  readonly stopGraceMs?: number;
  /** The version announced on `$SRV`; default 0.1.0. */
  readonly version?: string;
  /** Health figures for the `data` of the `$SRV.STATS` answer (see `startServiceHealth`). */
  readonly statsData?: () => Record<string, unknown>;
  /**
   * Scrubs the message of every error chunk an adapter's failure ends in, whichever adapter failed; default a
   * scrubber with no configured secrets (the SDK adapters scrub their own key before this).
   */
  readonly scrubber?: Scrubber;
  /**
   * Which reply subjects chunks, embeddings, cancel acks and `$SRV` answers go to (see `checkReply`): `main.ts`
   * passes `replyPolicyFromBus`; by default it is read from the connection.
   */
  readonly replyPolicy?: ReplyPolicy;
}

/** The provider service: serves every adapter's generate and cancel subjects. */
export interface ProviderHost {
  /** Subscribes every adapter's subjects; resolves once the server has them. */
  start(): Promise<void>;
  /** Unsubscribes, ends every request in flight with a retryable error chunk, and aborts its adapter call. */
  stop(): Promise<void>;
  /** Requests in flight, for stats and tests. */
  readonly inFlight: number;
  /** The `$SRV` instance id, once started. */
  readonly id: string | undefined;
}

interface Running {
  readonly controller: AbortController;
  readonly writer: ChunkWriter;
  readonly done: Promise<void>;
}

/** Splits `<provider>:<model>` and returns the model part, or throws when it names another provider. */
export function adapterModel(model: string, provider: string): string {
  const colon = model.indexOf(':');
  if (colon < 0) return model;
  const prefix = model.slice(0, colon);
  if (prefix !== provider) {
    throw new InvalidInputError(`model ${JSON.stringify(model)} belongs to provider ${JSON.stringify(prefix)}, not ${JSON.stringify(provider)}`);
  }
  return model.slice(colon + 1);
}

function toAdapterRequest(request: GenerateRequest, provider: string): AdapterRequest {
  return {
    requestId: request.requestId,
    model: adapterModel(request.model, provider),
    messages: request.messages,
    tools: request.tools,
    ...(request.maxTokens === undefined ? {} : { maxTokens: request.maxTokens }),
    ...(request.temperature === undefined ? {} : { temperature: request.temperature }),
    ...(request.outputSchema === undefined ? {} : { outputSchema: request.outputSchema }),
    ...(request.tenant === undefined ? {} : { tenant: request.tenant }),
    ...(request.sessionId === undefined ? {} : { sessionId: request.sessionId }),
    ...(request.turnId === undefined ? {} : { turnId: request.turnId }),
  };
}

/** The requestId of a body that failed validation, when it has a usable one. */
function salvageRequestId(codec: Codec, message: Msg): string {
  try {
    const value = codec.decode(message.data, contentTypeOf(message));
    if (typeof value === 'object' && value !== null && 'requestId' in value && typeof value.requestId === 'string') {
      return value.requestId.slice(0, 200);
    }
  } catch {
    // The body is unreadable; the error chunk says why and carries an empty requestId.
  }
  return '';
}

/**
 * Creates the provider host. Each adapter gets `subjects.providerGenerate(name)` in queue group
 * `subjects.providerQueue(name)` (so more instances add capacity) and `subjects.providerCancel(name)`
 * without a queue group (so the instance holding the request hears the cancel).
 *
 * @example
 * const host = createProviderHost({ nc, subjects, codec, logger, adapters: [createScriptedAdapter()] });
 * await host.start();
 */
export function createProviderHost(options: ProviderHostOptions): ProviderHost {
  const { nc, subjects, codec } = options;
  // Bad requests are expected; a flood of them must not become a flood of log lines.
  const refusals = createRefusalLog({ logger: options.logger, what: 'provider request refused' });
  const replyPolicy = options.replyPolicy ?? replyPolicyOf(nc);
  // Checked where each request comes in: a refused one starts nothing, and no chunk writer is made for it.
  const replies = createReplyGuard({ policy: replyPolicy, refusals });
  const requestTimeoutMs = options.requestTimeoutMs ?? DEFAULT_REQUEST_TIMEOUT_MS;
  const stopGraceMs = options.stopGraceMs ?? 5_000;
  const scrubber = options.scrubber ?? createScrubber({ logger: options.logger });
  const names = new Set<string>();
  for (const adapter of options.adapters) {
    if (names.has(adapter.name)) throw new InvalidInputError(`two adapters are named ${JSON.stringify(adapter.name)}`);
    names.add(adapter.name);
  }
  // Keyed by provider, then requestId: two providers may see the same requestId.
  const running = new Map<string, Map<string, Running>>();
  const embedders = new Map((options.embedders ?? []).map((embedder) => [embedder.name, embedder]));
  const embedding = new Set<AbortController>();
  const subscriptions: Subscription[] = [];
  let registration: ServiceRegistration | undefined;
  // Endpoints subscribe before the registration exists; their requests count once it does.
  const stats = { record: (endpoint: string, outcome: EndpointOutcome) => registration?.record(endpoint, outcome) };
  let state: 'idle' | 'started' | 'stopped' = 'idle';

  /** Ends a request early: the terminal chunk goes out now, the adapter is aborted behind it. */
  function interrupt(writer: ChunkWriter, controller: AbortController, reason: Error): void {
    writer.fail(toErrorData(reason));
    controller.abort(reason);
  }

  /** Runs one request; resolves with the failure's message when it ended in an error chunk (for `$SRV.STATS`). */
  async function run(adapter: ProviderAdapter, request: AdapterRequest, writer: ChunkWriter, controller: AbortController, logger: Logger): Promise<string | undefined> {
    const { signal } = controller;
    let failure: string | undefined;
    const timer = setTimeout(
      () => interrupt(writer, controller, new TimeoutError(`provider request ran past ${requestTimeoutMs} ms`, requestTimeoutMs)),
      requestTimeoutMs,
    );
    try {
      for await (const chunk of adapter.generate(request, { signal })) {
        if (writer.ended) break;
        writer.write(chunk);
        // The first chunk goes out at once (with the call's first heartbeat), not with the rest of what the adapter
        // yields in this turn of the event loop (the provider's writes are coalesced, see `startProviderService`).
        if (writer.nextSeq === 1) flushWrites(nc);
        if (isTerminalChunk(chunk)) break;
      }
      if (!writer.ended && !signal.aborted) {
        logger.warn('adapter ended without a done chunk; sending one');
        writer.write({ type: 'done', finishReason: 'stop' });
      }
    } catch (error) {
      if (!writer.ended) {
        const raw: ErrorData = signal.aborted ? toErrorData(abortReason(signal)) : toErrorData(error);
        if (raw.code === ErrorCode.internal) logger.error({ err: error }, 'adapter failed');
        else logger.info({ code: raw.code, retryable: raw.retryable }, 'provider request failed');
        const data = { ...raw, message: await scrubber.scrub(raw.message) };
        // A timeout or stop may have ended the stream while the message was scrubbed; then it keeps that end.
        if (writer.fail(data)) failure = `${data.code}: ${data.message}`;
      }
    } finally {
      clearTimeout(timer);
      // An adapter that stopped early because it noticed the abort still owes the stream its end.
      if (!writer.ended) writer.fail(toErrorData(abortReason(signal)));
    }
    return failure ?? (signal.aborted ? toErrorData(abortReason(signal)).message : undefined);
  }

  function onGenerate(adapter: ProviderAdapter, message: Msg, logger: Logger): void {
    if (!message.reply) {
      logger.warn({ subject: message.subject }, 'generate request without a reply subject; dropped');
      return;
    }
    let request: AdapterRequest;
    try {
      // Converting checks that the model belongs to this provider.
      request = toAdapterRequest(codec.decodeAs(generateRequestSchema, message.data, contentTypeOf(message)), adapter.name);
    } catch (error) {
      const requestId = salvageRequestId(codec, message);
      refusals.refused({ ...toErrorData(error), requestId, provider: adapter.name });
      createChunkWriter({ nc, codec, replySubject: message.reply, requestId }).fail(toErrorData(error));
      return;
    }
    const perProvider = running.get(adapter.name)!;
    const trace = traceGenerate(message.headers, adapter.name, request);
    const writer = trace.watch(createChunkWriter({ nc, codec, replySubject: message.reply, requestId: request.requestId }));
    if (perProvider.has(request.requestId)) {
      writer.fail({ code: ErrorCode.conflict, message: `request ${request.requestId} is already running`, retryable: false });
      return;
    }
    const requestLogger = logger.child({ requestId: request.requestId });
    const controller = new AbortController();
    const started = performance.now();
    const stopBeats = message.headers?.get(ProviderCallHeader.heartbeat) === '1' ? sendHeartbeats(message.reply, writer) : () => {};
    const done = trace
      .run(() => run(adapter, request, writer, controller, requestLogger))
      .finally(stopBeats)
      .then((failure) => registration?.record(adapter.name, { durationMs: performance.now() - started, ...(failure === undefined ? {} : { error: failure }) }))
      .catch((err: unknown) => requestLogger.error({ err }, 'provider request handler failed'))
      .finally(() => perProvider.delete(request.requestId));
    perProvider.set(request.requestId, { controller, writer, done });
  }

  /** Tells the caller this instance still holds its request: now and every second, until the terminal chunk. */
  function sendHeartbeats(replySubject: string, writer: ChunkWriter): () => void {
    const beat = () => {
      if (writer.ended || nc.isClosed()) return;
      const beatHeaders = msgpackHeaders();
      beatHeaders.set(ProviderCallHeader.event, PROVIDER_HEARTBEAT_EVENT);
      nc.publish(replySubject, new Uint8Array(), { headers: beatHeaders });
    };
    beat();
    const timer = setInterval(beat, PROVIDER_HEARTBEAT_MS);
    return () => clearInterval(timer);
  }

  /** Cancels a request this instance runs; every instance hears the cancel, the one running it answers. */
  function cancel(adapter: ProviderAdapter, id: string, logger: Logger): CancelAck | typeof NO_REPLY {
    const entry = running.get(adapter.name)?.get(id);
    if (!entry) return NO_REPLY;
    logger.info({ requestId: id }, 'provider request cancelled');
    interrupt(entry.writer, entry.controller, new CancelledError('provider request cancelled by the caller'));
    return { v: 1, id, cancelled: true };
  }

  /** Answers one embed request: the vectors, or a typed error (`unsupported` when the provider has no embedding model). */
  async function embed(provider: string, request: EmbedRequest, message: Msg): Promise<EmbedReply> {
    const controller = new AbortController();
    embedding.add(controller);
    // The caller's own wait, when it says it, bounds the work: a query memory gave up on after 200 ms is not retried for a minute.
    const callerWaitsMs = Number(message.headers?.get(EMBED_TIMEOUT_HEADER));
    const ownMs = options.embedTimeoutMs ?? 60_000;
    const timeoutMs = Number.isInteger(callerWaitsMs) && callerWaitsMs > 0 ? Math.min(ownMs, callerWaitsMs) : ownMs;
    const timer = setTimeout(() => controller.abort(new TimeoutError(`embed request ran past ${timeoutMs} ms`, timeoutMs)), timeoutMs);
    try {
      const embedder = embedders.get(provider);
      if (!embedder) {
        throw new AgentbusError(
          ErrorCode.unsupported,
          `provider ${provider} has no embedding model here (Anthropic has no embeddings API): point AGENTBUS_EMBED_PROVIDER at an OpenAI-compatible provider, or at none`,
        );
      }
      const { model, vectors } = await embedder.embed({ input: request.input, ...(request.model ? { model: adapterModel(request.model, provider) } : {}) }, { signal: controller.signal });
      return { v: 1, id: request.id, model, dimensions: vectors[0]?.length ?? 0, vectors };
    } catch (err) {
      throw controller.signal.aborted ? abortReason(controller.signal) : err;
    } finally {
      clearTimeout(timer);
      embedding.delete(controller);
    }
  }

  return {
    async start() {
      if (state !== 'idle') throw new InvalidInputError(`provider host cannot start: it is ${state}`);
      state = 'started';
      for (const adapter of options.adapters) {
        const logger = options.logger.child({ provider: adapter.name });
        running.set(adapter.name, new Map());
        const host = { nc, codec, logger, replies, refusals };
        subscriptions.push(
          nc.subscribe(subjects.providerGenerate(adapter.name), {
            queue: subjects.providerQueue(adapter.name),
            callback: (error, message) => {
              if (error) logger.warn({ err: error }, 'generate subscription error');
              else if (replies.admits(message)) onGenerate(adapter, message, logger);
            },
          }),
          serveCancelEndpoint({ ...host, name: `${adapter.name}-cancel`, subject: subjects.providerCancel(adapter.name), cancel: (request) => cancel(adapter, request.id, logger) }),
          serveEndpoint({
            ...host,
            stats,
            name: `${adapter.name}-embed`,
            subject: subjects.providerEmbed(adapter.name),
            queue: subjects.providerQueue(adapter.name),
            schema: embedRequestSchema,
            what: 'embed request',
            handle: (request, message) => embed(adapter.name, request, message),
            errorReply: (error, request): EmbedReply => ({ v: 1, id: request?.id ?? '', error }),
            failureMessage: 'embed request failed',
          }),
        );
        logger.info({ subject: subjects.providerGenerate(adapter.name) }, 'provider serving');
      }
      // Discovery (`$SRV.INFO|STATS`, service `agentbus-provider`): one endpoint per provider; its stats' `data`
      // carries the circuit breaker's state, which the dashboard shows.
      const adapters = new Map(options.adapters.map((adapter) => [adapter.name, adapter]));
      registration = createServiceRegistration(
        nc,
        {
          name: PROVIDER_SERVICE_NAME,
          version: options.version ?? '0.1.0',
          description: 'agentbus LLM providers',
          endpoints: options.adapters.flatMap((adapter) => [
            { name: adapter.name, subject: subjects.providerGenerate(adapter.name), queueGroup: subjects.providerQueue(adapter.name) },
            { name: `${adapter.name}-embed`, subject: subjects.providerEmbed(adapter.name), queueGroup: subjects.providerQueue(adapter.name) },
          ]),
        },
        {
          logger: options.logger,
          replyPolicy,
          ...(options.statsData ? { statsData: options.statsData } : {}),
          endpointData: (name) => {
            const circuit = adapters.get(name)?.circuit;
            return circuit ? { circuit: circuit() } : undefined;
          },
        },
      );
      await nc.flush();
    },
    async stop() {
      if (state === 'stopped') return;
      state = 'stopped';
      await registration?.stop();
      for (const subscription of subscriptions.splice(0)) subscription.unsubscribe();
      refusals.close();
      for (const controller of embedding) controller.abort(new ProviderError(ErrorCode.providerError, 'provider service is stopping', { retryable: true }));
      const pending: Promise<void>[] = [];
      for (const perProvider of running.values()) {
        for (const entry of perProvider.values()) {
          interrupt(entry.writer, entry.controller, new ProviderError(ErrorCode.providerError, 'provider service is stopping', { retryable: true }));
          pending.push(entry.done);
        }
      }
      let timer: ReturnType<typeof setTimeout> | undefined;
      const grace = new Promise<void>((resolve) => {
        timer = setTimeout(resolve, stopGraceMs);
      });
      await Promise.race([Promise.allSettled(pending), grace]);
      clearTimeout(timer);
      if (!nc.isClosed()) await nc.flush().catch((err: unknown) => options.logger.warn({ err }, 'flush on stop failed'));
    },
    get id() {
      return registration?.id;
    },
    get inFlight() {
      let count = 0;
      for (const perProvider of running.values()) count += perProvider.size;
      return count;
    },
  };
}
