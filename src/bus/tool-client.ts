import type { NatsConnection } from '@nats-io/nats-core';
import { ErrorCode, NoRespondersError, TimeoutError, abortReason, toErrorData } from '../errors.ts';
import type { ErrorData } from '../errors.ts';
import type { Logger } from '../logging.ts';
import { isToken, toolCallReplySchema } from '../protocol/index.ts';
import type { CancelRequest, Codec, Subjects, ToolCallReply, ToolCallRequest } from '../protocol/index.ts';
import { parseToolMetadata } from '../tool-sdk/tool-metadata.ts';
import type { ToolDescriptor } from '../tool-sdk/tool-metadata.ts';
import { abortPromise, request } from './request.ts';
import { createReplyMux } from './reply-mux.ts';
import type { ReplyMux } from './reply-mux.ts';
import { discoverServices } from './service-discovery.ts';

/** Options of {@link createToolClient}. */
export interface ToolClientOptions {
  readonly nc: NatsConnection;
  readonly subjects: Subjects;
  readonly codec: Codec;
  readonly logger: Logger;
  /** How long a discovered tool list is reused; default 2000 ms. */
  readonly discoveryTtlMs?: number;
  /**
   * A list used this close to the end of its TTL is refreshed in the background, so that callers under
   * steady traffic never wait for discovery; it is never used past its TTL. Default a quarter of the TTL.
   */
  readonly refreshAheadMs?: number;
  /** Longest wait for the first `$SRV.INFO` answer; default 1000 ms. */
  readonly discoveryTimeoutMs?: number;
  /** Only this `$SRV` service name; by default every service is asked and tool endpoints are picked by subject. */
  readonly serviceName?: string;
  /** Longest wait for a cancel acknowledgement; default 500 ms. */
  readonly cancelTimeoutMs?: number;
  /** Reply subjects for calls; by default the client makes its own mux on `nc`. */
  readonly replies?: ReplyMux;
  readonly now?: () => number;
}

/** The runtime's view of the tools on the bus. */
export interface ToolClient {
  /** Every tool some live worker serves, from `$SRV.INFO`, cached for the discovery TTL. */
  listTools(options: { signal?: AbortSignal }): Promise<ToolDescriptor[]>;
  /**
   * Calls a tool. Never throws for tool-level failures: unknown tool, timeout, bad arguments, worker
   * errors and malformed replies all come back as `{ ok: false, error }`. On abort it sends a cancel to
   * the workers and rejects with the signal's reason.
   */
  call(request: ToolCallRequest, options: { signal?: AbortSignal; timeoutMs?: number }): Promise<ToolCallReply>;
  /** Forgets the cached tool list, so the next `listTools` asks the bus. */
  invalidate(): void;
}

function failed(callId: string, error: ErrorData): ToolCallReply {
  return { v: 1, callId, ok: false, error };
}

/**
 * Creates the tool client of the runtime.
 *
 * @example
 * const tools = createToolClient({ nc, subjects, codec, logger });
 * const offered = await tools.listTools({ signal });
 * const reply = await tools.call({ v: 1, callId, effectId, name: 'read_file', args, tenant, sessionId, turnId, deadline }, { signal });
 */
export function createToolClient(options: ToolClientOptions): ToolClient {
  const { nc, subjects, codec } = options;
  const replies = options.replies ?? createReplyMux(nc);
  const now = options.now ?? Date.now;
  const logger = options.logger.child({ component: 'tool-client' });
  const ttl = options.discoveryTtlMs ?? 2000;
  const refreshAt = ttl - Math.min(ttl, options.refreshAheadMs ?? ttl / 4);
  let cached: { tools: ToolDescriptor[]; at: number } | undefined;
  let pending: Promise<ToolDescriptor[]> | undefined;

  async function discover(): Promise<ToolDescriptor[]> {
    const instances = await discoverServices(nc, options.serviceName, {
      timeoutMs: options.discoveryTimeoutMs ?? 1000,
      codec,
      logger,
    });
    const tools = new Map<string, ToolDescriptor>();
    for (const instance of instances) {
      for (const endpoint of instance.endpoints) {
        if (tools.has(endpoint.name) || !isToken(endpoint.name) || endpoint.subject !== subjects.toolCall(endpoint.name)) continue;
        const descriptor = parseToolMetadata(endpoint.name, endpoint.metadata, codec);
        if (descriptor) tools.set(endpoint.name, descriptor);
        else logger.warn({ tool: endpoint.name, service: instance.name, id: instance.id }, 'skipped a tool with malformed metadata');
      }
    }
    return [...tools.values()].sort((a, b) => a.name.localeCompare(b.name));
  }

  /** Starts a discovery unless one runs; concurrent callers share it. */
  function refresh(): Promise<ToolDescriptor[]> {
    pending ??= discover()
      .then((tools) => {
        cached = { tools, at: now() };
        return tools;
      })
      .finally(() => {
        pending = undefined;
      });
    return pending;
  }

  async function listTools(listOptions: { signal?: AbortSignal }): Promise<ToolDescriptor[]> {
    listOptions.signal?.throwIfAborted();
    if (cached && now() - cached.at < ttl) {
      if (now() - cached.at >= refreshAt) refresh().catch((err: unknown) => logger.warn({ err }, 'background tool discovery failed'));
      return cached.tools;
    }
    // The discovery is shared: an abort stops this caller's wait, not the discovery.
    const { promise: aborted, cleanup } = abortPromise(listOptions.signal);
    try {
      return await Promise.race([refresh(), aborted]);
    } finally {
      cleanup();
    }
  }

  async function sendCancel(name: string, callId: string): Promise<void> {
    const body: CancelRequest = { v: 1, id: callId };
    try {
      const ack = await request(nc, subjects.toolCancel(name), codec.encode(body), { timeoutMs: options.cancelTimeoutMs ?? 500, replies });
      logger.debug({ tool: name, callId, ack: codec.decode(ack.data, ack.headers?.get('Content-Type') || undefined) }, 'tool cancel acknowledged');
    } catch (err) {
      // No ack is normal when the call already finished or is still queued on a worker.
      logger.debug({ err, tool: name, callId }, 'tool cancel not acknowledged');
    }
  }

  async function call(toolRequest: ToolCallRequest, callOptions: { signal?: AbortSignal; timeoutMs?: number }): Promise<ToolCallReply> {
    const { callId, name } = toolRequest;
    const signal = callOptions.signal;
    signal?.throwIfAborted();
    if (!isToken(name)) {
      return failed(callId, { code: ErrorCode.unknownTool, message: `no tool is named ${JSON.stringify(name)}`, retryable: false });
    }
    const timeoutMs = Math.max(1, callOptions.timeoutMs ?? toolRequest.deadline - now());
    let payload: Uint8Array;
    try {
      payload = codec.encode(toolRequest);
    } catch (error) {
      return failed(callId, toErrorData(error));
    }
    try {
      const message = await request(nc, subjects.toolCall(name), payload, { timeoutMs, replies, ...(signal ? { signal } : {}) });
      const reply = toolCallReplySchema.safeParse(decodeQuietly(message.data, message.headers?.get('Content-Type') || undefined));
      if (!reply.success || reply.data.callId !== callId) {
        logger.warn({ tool: name, callId }, 'malformed tool reply');
        return failed(callId, { code: ErrorCode.internal, message: `tool ${name} sent a malformed reply`, retryable: false });
      }
      return reply.data;
    } catch (error) {
      if (signal?.aborted) {
        await sendCancel(name, callId);
        throw abortReason(signal);
      }
      if (error instanceof NoRespondersError) {
        return failed(callId, { code: ErrorCode.unknownTool, message: `no live worker serves tool ${name}`, retryable: false });
      }
      if (error instanceof TimeoutError) {
        void sendCancel(name, callId);
        return failed(callId, { code: ErrorCode.timeout, message: `tool ${name} did not answer within ${timeoutMs} ms`, retryable: true });
      }
      logger.warn({ err: error, tool: name, callId }, 'tool call failed on the bus');
      return failed(callId, toErrorData(error));
    }
  }

  function decodeQuietly(data: Uint8Array, contentType: string | undefined): unknown {
    try {
      return codec.decode(data, contentType);
    } catch (err) {
      logger.debug({ err }, 'undecodable tool reply');
      return undefined;
    }
  }

  return {
    listTools,
    call,
    invalidate() {
      cached = undefined;
    },
  };
}

export type { ToolDescriptor };
