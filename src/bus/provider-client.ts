import { headers as createHeaders } from '@nats-io/nats-core';
import type { Msg, MsgHdrs, NatsConnection } from '@nats-io/nats-core';
import {
  AgentbusError,
  ErrorCode,
  InvalidInputError,
  NoRespondersError,
  ProviderError,
  TimeoutError,
  abortReason,
  fromErrorData,
} from '../errors.ts';
import type { ErrorData } from '../errors.ts';
import type { Logger } from '../logging.ts';
import { traceProviderCall } from '../telemetry/index.ts';
import type { ProviderCallTrace } from '../telemetry/index.ts';
import { contentTypeOf, PROVIDER_HEARTBEAT_EVENT, ProviderCallHeader, generateChunkSchema, isToken } from '../protocol/index.ts';
import type { CancelRequest, Codec, GenerateChunk, GenerateRequest, Subjects } from '../protocol/index.ts';
import { request as busRequest, msgpackHeaders } from './request.ts';
import { createReplyMux } from './reply-mux.ts';
import type { ReplyMux } from './reply-mux.ts';
import { streamRequest } from './stream-reply.ts';

/** Default longest silence between two chunks (the first one included). */
export const DEFAULT_IDLE_TIMEOUT_MS = 120_000;
/** Default longest provider call. */
export const DEFAULT_GENERATE_TIMEOUT_MS = 600_000;
/** Default wait for the acknowledgement of a cancel. */
export const DEFAULT_CANCEL_TIMEOUT_MS = 1_000;
/**
 * Default longest silence (no chunk, no heartbeat) of a provider instance that sends heartbeats, before its
 * stream is taken for broken: three of its heartbeats missed.
 */
export const DEFAULT_HEARTBEAT_LAPSE_MS = 3_000;

/** Options of one provider call. */
export interface GenerateOptions {
  readonly signal?: AbortSignal;
  /** Longest silence before the first chunk and between chunks. Default 120 s. */
  readonly idleTimeoutMs?: number;
  /** Longest whole call. Default 10 minutes. */
  readonly timeoutMs?: number;
  /**
   * Longest silence of a provider instance that has sent a heartbeat of this call: past it the instance is taken
   * for dead and the call ends `stream_interrupted` (retryable). Default 3 s.
   */
  readonly heartbeatLapseMs?: number;
}

/** The runtime's side of the provider protocol. */
export interface ProviderClient {
  /**
   * Streams one provider call: yields `text-delta`, `tool-call`, `usage` and `retry` chunks and finally
   * the `done` chunk. Text deltas that arrive together are yielded as one `text-delta` (their texts joined).
   * An `error` chunk is thrown as the rebuilt error. The request asks for heartbeats: a provider instance that
   * sends them and then falls silent past the heartbeat lapse (it died holding the call) ends the call
   * `stream_interrupted`, as a connection drop does. When the call ends early (abort, timeout, a broken stream,
   * or the consumer stops iterating) a cancel is sent to the provider first.
   */
  generate(request: GenerateRequest, options?: GenerateOptions): AsyncIterable<GenerateChunk>;
}

/** Options of {@link createProviderClient}. */
export interface ProviderClientOptions {
  readonly nc: NatsConnection;
  readonly subjects: Subjects;
  readonly codec: Codec;
  readonly logger: Logger;
  /** Wait for the acknowledgement of a cancel; no acknowledgement is fine. Default 1 s. */
  readonly cancelTimeoutMs?: number;
  /** Reply subjects for the streams; by default the client makes its own mux on `nc`. */
  readonly replies?: ReplyMux;
}

/** The provider of a `<provider>:<model>` name; throws {@link InvalidInputError} when there is none. */
export function providerOfModel(model: string): string {
  const provider = model.slice(0, Math.max(0, model.indexOf(':')));
  if (!isToken(provider)) throw new InvalidInputError(`model must be <provider>:<model>, got ${JSON.stringify(model)}`);
  return provider;
}

/** Rebuilds an `error` chunk's error: the generic codes as their classes, the rest as a {@link ProviderError}. */
export function providerErrorFromData(data: ErrorData, provider: string): AgentbusError {
  if (data.code === ErrorCode.cancelled || data.code === ErrorCode.timeout || data.code === ErrorCode.invalidInput) {
    return fromErrorData(data);
  }
  return new ProviderError(data.code, data.message, { retryable: data.retryable, provider });
}

/**
 * Creates the provider client.
 *
 * @example
 * const providers = createProviderClient({ nc, subjects, codec, logger });
 * for await (const chunk of providers.generate(request, { signal })) {
 *   if (chunk.type === 'text-delta') process.stdout.write(chunk.text);
 * }
 */
export function createProviderClient(options: ProviderClientOptions): ProviderClient {
  const { nc, subjects, codec, logger } = options;
  const replies = options.replies ?? createReplyMux(nc);
  const cancelTimeoutMs = options.cancelTimeoutMs ?? DEFAULT_CANCEL_TIMEOUT_MS;
  // Streams in flight when the connection drops may have lost chunks no one will resend; they end as
  // interrupted at the reconnect instead of waiting for their idle timeout.
  const inFlight = new Set<AbortController>();
  // What every call sends but its trace context: encoded once, for the calls that carry none (tracing off).
  const untracedHeaders = generateHeaders();
  let watchingStatus = false;
  function watchReconnects(): void {
    if (watchingStatus) return;
    watchingStatus = true;
    void (async () => {
      for await (const status of nc.status()) {
        if (status.type !== 'reconnect' && status.type !== 'disconnect') continue;
        for (const controller of inFlight) {
          controller.abort(new ProviderError(ErrorCode.streamInterrupted, `the NATS connection dropped (${status.type}) while a provider stream was open`, { retryable: true }));
        }
      }
    })().catch((err: unknown) => logger.warn({ err }, 'provider client stopped watching the connection'));
  }

  async function sendCancel(provider: string, requestId: string): Promise<void> {
    const body: CancelRequest = { v: 1, id: requestId };
    try {
      const reply = await busRequest(nc, subjects.providerCancel(provider), codec.encode(body), { timeoutMs: cancelTimeoutMs, replies });
      logger.debug({ provider, requestId, ack: codec.decode(reply.data, contentTypeOf(reply)) }, 'provider cancel acknowledged');
    } catch (err) {
      // The request may have finished meanwhile: then no instance holds it and none answers.
      logger.debug({ err, provider, requestId }, 'provider cancel not acknowledged');
    }
  }

  function decodeChunk(message: Msg, provider: string): GenerateChunk {
    try {
      const value = codec.decode(message.data, contentTypeOf(message));
      return commonChunk(value) ?? codec.validate(generateChunkSchema, value);
    } catch (cause) {
      throw new ProviderError(ErrorCode.providerError, `provider ${provider} sent a malformed chunk: ${(cause as Error).message}`, {
        provider,
        cause,
      });
    }
  }

  function generate(request: GenerateRequest, callOptions: GenerateOptions = {}): AsyncIterable<GenerateChunk> {
    const trace = traceProviderCall(request);
    return trace.watch(stream(request, callOptions, trace));
  }

  async function* stream(request: GenerateRequest, callOptions: GenerateOptions, trace: ProviderCallTrace): AsyncGenerator<GenerateChunk, void, undefined> {
    const { signal } = callOptions;
    if (signal?.aborted) throw abortReason(signal);
    const provider = providerOfModel(request.model);
    const subject = subjects.providerGenerate(provider);
    let expectedSeq = 0;
    let ended = false;
    let cancelNeeded = true;
    watchReconnects();
    const interruption = new AbortController();
    const forwardAbort = () => interruption.abort(signal?.reason);
    signal?.addEventListener('abort', forwardAbort, { once: true });
    inFlight.add(interruption);
    const idleTimeoutMs = callOptions.idleTimeoutMs ?? DEFAULT_IDLE_TIMEOUT_MS;
    const watchdog = createHeartbeatWatchdog({
      lapseMs: callOptions.heartbeatLapseMs ?? DEFAULT_HEARTBEAT_LAPSE_MS,
      idleTimeoutMs,
      subject,
      provider,
      interrupt: (reason) => interruption.abort(reason),
    });
    try {
      const stream = streamRequest(nc, subject, codec.encode(request), () => false, {
        idleTimeoutMs,
        timeoutMs: callOptions.timeoutMs ?? DEFAULT_GENERATE_TIMEOUT_MS,
        replies,
        signal: interruption.signal,
        // A traced call's headers are its own: the trace context is added to them.
        headers: trace.untraced ? untracedHeaders : trace.inject(generateHeaders()),
      });
      for await (const batch of stream) {
        // Text deltas that arrived together go on as one: fewer steps (and live events) for the same text.
        let text: Extract<GenerateChunk, { type: 'text-delta' }> | undefined;
        for (const message of batch) {
          if (message.headers?.get(ProviderCallHeader.event) === PROVIDER_HEARTBEAT_EVENT) {
            watchdog.heard(false);
            continue;
          }
          watchdog.heard(true);
          const chunk = decodeChunk(message, provider);
          if (chunk.requestId !== request.requestId || chunk.seq !== expectedSeq) {
            // Chunks were lost (e.g. across a NATS reconnect): the call can be made again from the start.
            throw new ProviderError(
              ErrorCode.streamInterrupted,
              `provider ${provider} broke the stream of ${request.requestId}: expected seq ${expectedSeq}, got ${chunk.requestId} seq ${chunk.seq}`,
              { provider, retryable: true },
            );
          }
          expectedSeq += 1;
          if (chunk.type === 'text-delta') {
            text = text ? { ...chunk, text: text.text + chunk.text } : chunk;
            continue;
          }
          if (text) yield text;
          text = undefined;
          if (chunk.type === 'error') {
            ended = true;
            throw providerErrorFromData(chunk.error, provider);
          }
          if (chunk.type === 'done') ended = true;
          yield chunk;
          if (ended) return;
        }
        if (text) yield text;
      }
    } catch (error) {
      if (error instanceof NoRespondersError) {
        cancelNeeded = false;
        throw new ProviderError(ErrorCode.noResponders, `no provider service serves "${provider}" (nobody listens on ${subject})`, {
          retryable: true,
          provider,
          cause: error,
        });
      }
      throw error;
    } finally {
      watchdog.stop();
      signal?.removeEventListener('abort', forwardAbort);
      inFlight.delete(interruption);
      // Whatever ended the call early, the provider should stop spending tokens on it.
      if (!ended && cancelNeeded) await sendCancel(provider, request.requestId);
    }
  }

  return { generate };
}

/** The headers of a provider call: msgpack, and heartbeats asked for. */
function generateHeaders(): MsgHdrs {
  const extra = createHeaders();
  extra.set(ProviderCallHeader.heartbeat, '1');
  return msgpackHeaders(extra);
}

/**
 * Watches a stream whose provider instance sends heartbeats. Once one came, silence past `lapseMs` means the
 * instance is gone (`stream_interrupted`), and since heartbeats keep the stream's own idle timer from firing, a
 * stream with heartbeats but no chunk for `idleTimeoutMs` times out here instead. Before the first heartbeat
 * (a provider that sends none) it does nothing.
 */
function createHeartbeatWatchdog(options: {
  readonly lapseMs: number;
  readonly idleTimeoutMs: number;
  readonly subject: string;
  readonly provider: string;
  readonly interrupt: (reason: Error) => void;
}) {
  let lastHeard = 0;
  let lastChunk = Date.now();
  let timer: ReturnType<typeof setInterval> | undefined;
  const check = () => {
    const now = Date.now();
    if (now - lastHeard > options.lapseMs) {
      options.interrupt(
        new ProviderError(ErrorCode.streamInterrupted, `provider ${options.provider} stopped sending heartbeats for ${options.lapseMs} ms on ${options.subject}: its instance is gone`, {
          provider: options.provider,
          retryable: true,
        }),
      );
    } else if (now - lastChunk > options.idleTimeoutMs) {
      options.interrupt(new TimeoutError(`stream on ${options.subject} was silent for ${options.idleTimeoutMs} ms`, options.idleTimeoutMs, options.subject));
    }
  };
  return {
    /** Notes a message: a chunk, or only a heartbeat. */
    heard(chunk: boolean) {
      lastHeard = Date.now();
      if (chunk) lastChunk = lastHeard;
      // Only a heartbeat arms the watch: a provider that sends none may well be silent between chunks.
      else timer ??= setInterval(check, Math.max(50, Math.min(options.lapseMs, options.idleTimeoutMs) / 4));
    },
    stop() {
      clearInterval(timer);
    },
  };
}

/**
 * The chunks of every call (`text-delta`, one per streamed word or so, `tool-call`, `usage` and `done`), checked by
 * hand as `generateChunkSchema` would check them, and copied with only the fields it keeps; undefined for any other
 * value (another type, or one that does not match), which then goes through the schema and its error message.
 */
export function commonChunk(value: unknown): GenerateChunk | undefined {
  if (typeof value !== 'object' || value === null || Array.isArray(value)) return undefined;
  const chunk = value as Record<string, unknown>;
  const { v, requestId, seq, type } = chunk;
  if (v !== 1 || typeof requestId !== 'string' || !Number.isSafeInteger(seq)) return undefined;
  const at = seq as number;
  // Each chunk built whole, in the schema's key order: no intermediate object per chunk.
  switch (type) {
    case 'text-delta':
      return typeof chunk.text === 'string' ? { v: 1, requestId, seq: at, type, text: chunk.text } : undefined;
    case 'tool-call': {
      const { toolCallId, name } = chunk;
      return typeof toolCallId === 'string' && typeof name === 'string' && 'args' in chunk ? { v: 1, requestId, seq: at, type, toolCallId, name, args: chunk.args } : undefined;
    }
    case 'usage': {
      const usage = chunk.usage as Record<string, unknown> | null | undefined;
      if (typeof usage !== 'object' || usage === null || Array.isArray(usage) || !isFiniteNumber(usage.inputTokens) || !isFiniteNumber(usage.outputTokens)) return undefined;
      return { v: 1, requestId, seq: at, type, usage: { inputTokens: usage.inputTokens, outputTokens: usage.outputTokens } };
    }
    case 'done': {
      const { finishReason, model, cost } = chunk;
      if (typeof finishReason !== 'string' || (model !== undefined && typeof model !== 'string') || (cost !== undefined && !isFiniteNumber(cost))) return undefined;
      const done: Extract<GenerateChunk, { type: 'done' }> & { model?: string | undefined; cost?: number | undefined } = { v: 1, requestId, seq: at, type, finishReason };
      if ('model' in chunk) done.model = model;
      if ('cost' in chunk) done.cost = cost;
      return done;
    }
    default:
      return undefined;
  }
}

function isFiniteNumber(value: unknown): value is number {
  return typeof value === 'number' && Number.isFinite(value);
}
