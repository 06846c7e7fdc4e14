import { headers as createHeaders } from '@nats-io/nats-core';
import type { MsgHdrs, NatsConnection } from '@nats-io/nats-core';
import { ErrorCode, NoRespondersError, TimeoutError, WorkerLostError, abortReason, toErrorData } from '../errors.ts';
import type { ErrorData } from '../errors.ts';
import type { Logger } from '../logging.ts';
import { traceToolCall } from '../telemetry/index.ts';
import type { RequestTrace } from '../telemetry/index.ts';
import { contentTypeOf, SafetyTier, ToolCallHeader, ToolMetadataKey, ToolWorkerMetadataKey, isToken, parseToolMetadata, toolCallReplySchema } from '../protocol/index.ts';
import type { CancelRequest, Codec, Subjects, ToolCallEvent, ToolCallReply, ToolCallRequest, ToolDescriptor } from '../protocol/index.ts';
import { abortPromise, msgpackHeaders, request } from './request.ts';
import { requestToolCall } from './tool-call-request.ts';
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
  /**
   * How long a worker that sends heartbeats may be silent before its call is given up as lost (`worker_lost`);
   * at least three of its announced heartbeat intervals. Default 3000 ms.
   */
  readonly heartbeatLapseMs?: number;
  /** Reply subjects for calls; by default the client makes its own mux on `nc`. */
  readonly replies?: ReplyMux;
  readonly now?: () => number;
}

/** A tool as discovered: what its workers announced, and what every one of them does besides. */
export interface DiscoveredTool extends ToolDescriptor {
  /** The longest heartbeat interval its workers announce; undefined when one of them sends none. */
  readonly heartbeatMs?: number;
  /** True when every worker serving it keeps a result ledger for it (a repeat is answered from the record). */
  readonly ledger: boolean;
}

/** Options of one {@link ToolClient.call}. */
export interface ToolCallOptions {
  readonly signal?: AbortSignal;
  readonly timeoutMs?: number;
  /** 1 (default) for a first attempt; 2 and up for a repeat of the same `effectId`. */
  readonly attempt?: number;
  /** Hears the worker's progress reports. */
  readonly onProgress?: (event: ToolCallEvent) => void;
  /**
   * Asks the worker for its output as text scrubbed of secrets (`Agentbus-Scrub-Output`); a reply that comes so
   * has {@link ToolClientReply.outputScrubbed}. A worker that does not scrub answers as usual.
   */
  readonly scrubOutput?: boolean;
}

/** A tool's reply as the client returns it. */
export type ToolClientReply = ToolCallReply & {
  /**
   * True when the worker said (`Agentbus-Output-Scrubbed`) that `output`, text, is scrubbed with the full pass. Not
   * on the wire: the client sets it from the reply's header, on successful replies asked with `scrubOutput` only.
   */
  readonly outputScrubbed?: true;
};

/** The runtime's view of the tools on the bus. */
export interface ToolClient {
  /** Every tool some live worker serves, from `$SRV.INFO`, cached for the discovery TTL. */
  listTools(options: { signal?: AbortSignal }): Promise<DiscoveredTool[]>;
  /**
   * Calls a tool. Never throws for tool-level failures: unknown tool, timeout, bad arguments, worker
   * errors, a worker that fell silent (`worker_lost`) and malformed replies all come back as `{ ok: false, error }`.
   * No worker listening is `no_responders` (retryable: none is there at the moment, a restart) for a tool some
   * worker announced to this client before, `unknown_tool` for one none ever did. On abort it sends a cancel
   * naming the call's id, tenant and session to the workers and rejects with the signal's reason.
   */
  call(request: ToolCallRequest, options: ToolCallOptions): Promise<ToolClientReply>;
  /**
   * The tool as a worker last announced it to this client, whether or not one serves it now; undefined for a tool
   * no discovery ever found.
   */
  announced(name: string): DiscoveredTool | undefined;
  /** Forgets the cached tool list, so the next `listTools` asks the bus, and what earlier discoveries found. */
  invalidate(): void;
}

/** Safety tiers from the least strict to the most. */
const TIER_STRICTNESS: readonly SafetyTier[] = [SafetyTier.readOnly, SafetyTier.sideEffecting, SafetyTier.privileged];

/** A tier's place in {@link TIER_STRICTNESS}; anything else announced counts as the strictest. */
function strictness(tier: string | undefined): number {
  const at = TIER_STRICTNESS.indexOf(tier as SafetyTier);
  return at === -1 ? TIER_STRICTNESS.length - 1 : at;
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
  const lapseMs = options.heartbeatLapseMs ?? 3000;
  let cached: { tools: DiscoveredTool[]; byName: Map<string, DiscoveredTool>; at: number } | undefined;
  let pending: Promise<DiscoveredTool[]> | undefined;
  // Every tool a discovery found, as last announced: a worker that went away is waited for, not taken for unknown.
  const seen = new Map<string, DiscoveredTool>();
  const firstHeaders = callHeaders(1, false);
  const firstScrubbedHeaders = callHeaders(1, true);

  async function discover(): Promise<DiscoveredTool[]> {
    const instances = await discoverServices(nc, options.serviceName, {
      timeoutMs: options.discoveryTimeoutMs ?? 1000,
      codec,
      logger,
    });
    // Every announcement of each tool on this prefix: a call goes to any of its workers.
    const announced = new Map<string, Array<{ metadata: Readonly<Record<string, string>>; service: string; id: string }>>();
    for (const instance of instances) {
      for (const endpoint of instance.endpoints) {
        if (!isToken(endpoint.name) || endpoint.subject !== subjects.toolCall(endpoint.name)) continue;
        const list = announced.get(endpoint.name) ?? [];
        list.push({ metadata: endpoint.metadata, service: instance.name, id: instance.id });
        announced.set(endpoint.name, list);
      }
    }
    const tools: DiscoveredTool[] = [];
    for (const [name, announcements] of announced) {
      let descriptor: ToolDescriptor | undefined;
      for (const { metadata, service, id } of announcements) {
        const parsed = parseToolMetadata(name, metadata, codec);
        if (!parsed) logger.warn({ tool: name, service, id }, 'a worker announced a tool with malformed metadata');
        descriptor ??= parsed;
      }
      if (!descriptor) continue;
      // Count on what all the workers do. Workers that disagree on what the tool is (two versions, two servers
      // under one name, or one that lies) get the strictest reading, so that no announcement can take away an
      // approval or make a side effect count as safe to repeat; a malformed tier counts as privileged.
      const beats = announcements.map(({ metadata }) => Number(metadata[ToolWorkerMetadataKey.heartbeatMs]));
      // A call may reach the slowest of them: it is given the longest timeout any announces.
      const timeouts = announcements.map(({ metadata }) => Number(metadata[ToolMetadataKey.timeoutMs])).filter((ms) => Number.isInteger(ms) && ms > 0);
      const tier = Math.max(...announcements.map(({ metadata }) => strictness(metadata[ToolMetadataKey.tier])));
      if (announcements.some(({ metadata }) => metadata[ToolMetadataKey.tier] !== descriptor.tier)) {
        logger.debug({ tool: name, tiers: announcements.map(({ metadata, service }) => `${service}: ${metadata[ToolMetadataKey.tier]}`) }, 'workers of a tool announce different tiers');
      }
      tools.push({
        ...descriptor,
        tier: TIER_STRICTNESS[tier]!,
        timeoutMs: Math.max(descriptor.timeoutMs, ...timeouts),
        idempotent: announcements.every(({ metadata }) => metadata[ToolMetadataKey.idempotent] === 'true'),
        ledger: announcements.every(({ metadata }) => metadata[ToolWorkerMetadataKey.ledger] === 'true'),
        ...(beats.every((ms) => Number.isInteger(ms) && ms > 0) ? { heartbeatMs: Math.max(...beats) } : {}),
      });
    }
    return tools.sort((a, b) => a.name.localeCompare(b.name));
  }

  /** Starts a discovery unless one runs; concurrent callers share it. */
  function refresh(): Promise<DiscoveredTool[]> {
    pending ??= discover()
      .then((tools) => {
        cached = { tools, byName: new Map(tools.map((tool) => [tool.name, tool])), at: now() };
        for (const tool of tools) seen.set(tool.name, tool);
        return tools;
      })
      .finally(() => {
        pending = undefined;
      });
    return pending;
  }

  async function listTools(listOptions: { signal?: AbortSignal }): Promise<DiscoveredTool[]> {
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

  async function sendCancel(name: string, { callId, tenant, sessionId }: ToolCallRequest): Promise<void> {
    const body: CancelRequest = { v: 1, id: callId, tenant, sessionId };
    try {
      const ack = await request(nc, subjects.toolCancel(name), codec.encode(body), { timeoutMs: options.cancelTimeoutMs ?? 500, replies });
      logger.debug({ tool: name, callId, ack: codec.decode(ack.data, contentTypeOf(ack)) }, 'tool cancel acknowledged');
    } catch (err) {
      // No ack is normal when the call already finished or is still queued on a worker.
      logger.debug({ err, tool: name, callId }, 'tool cancel not acknowledged');
    }
  }

  function call(toolRequest: ToolCallRequest, callOptions: ToolCallOptions): Promise<ToolClientReply> {
    const trace = traceToolCall(toolRequest, callOptions.attempt ?? 1);
    return trace.settle(send(toolRequest, callOptions, trace), (reply) => (reply.ok ? undefined : reply.error));
  }

  async function send(toolRequest: ToolCallRequest, callOptions: ToolCallOptions, trace: RequestTrace): Promise<ToolClientReply> {
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
    // The last tool list says whether this tool's workers all send heartbeats: then silence from the start means
    // a lost call. Otherwise silence counts only after a first heartbeat.
    const beats = cached?.byName.get(name)?.heartbeatMs;
    const attempt = callOptions.attempt ?? 1;
    const scrubOutput = callOptions.scrubOutput === true;
    try {
      const message = await requestToolCall(nc, subjects.toolCall(name), payload, {
        replies,
        codec,
        // The shared headers of a first attempt stay untouched: a traced call gets its own.
        headers: attempt === 1 && trace.untraced ? (scrubOutput ? firstScrubbedHeaders : firstHeaders) : trace.inject(callHeaders(attempt, scrubOutput)),
        timeoutMs,
        lapseMs: Math.max(lapseMs, 3 * (beats ?? 0)),
        expectHeartbeats: beats !== undefined,
        logger,
        ...(signal ? { signal } : {}),
        ...(callOptions.onProgress ? { onEvent: progressOnly(callOptions.onProgress) } : {}),
      });
      const decoded = decodeQuietly(message.data, contentTypeOf(message));
      const answered = answeredReply(decoded);
      const reply = answered ? { success: true as const, data: answered } : toolCallReplySchema.safeParse(decoded);
      if (!reply.success || reply.data.callId !== callId) {
        logger.warn({ tool: name, callId }, 'malformed tool reply');
        return failed(callId, { code: ErrorCode.internal, message: `tool ${name} sent a malformed reply`, retryable: false });
      }
      const scrubbed = scrubOutput && reply.data.ok && typeof reply.data.output === 'string' && message.headers?.get(ToolCallHeader.outputScrubbed) === '1';
      return scrubbed ? { ...reply.data, outputScrubbed: true } : reply.data;
    } catch (error) {
      if (signal?.aborted) {
        await sendCancel(name, toolRequest);
        throw abortReason(signal);
      }
      if (error instanceof NoRespondersError) {
        // Nobody listens now. A tool that was announced is coming back (a restart, a worker started later): the
        // caller may wait for it. The call never reached a worker, so sending it again is safe for any tier.
        if (seen.has(name)) return failed(callId, { code: ErrorCode.noResponders, message: `no worker of tool ${name} is listening now`, retryable: true });
        return failed(callId, { code: ErrorCode.unknownTool, message: `no live worker serves tool ${name}`, retryable: false });
      }
      if (error instanceof WorkerLostError) {
        // It may be alive but stalled (paused, partitioned): tell it to stop.
        void sendCancel(name, toolRequest);
        return failed(callId, toErrorData(error));
      }
      if (error instanceof TimeoutError) {
        void sendCancel(name, toolRequest);
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
    announced: (name) => seen.get(name),
    invalidate() {
      cached = undefined;
      seen.clear();
    },
  };
}

/**
 * A reply that answered (`ok: true`, the common one), checked by hand as `toolCallReplySchema` would check it and
 * copied with only the fields it keeps; undefined for anything else, which then goes through the schema.
 */
export function answeredReply(value: unknown): ToolCallReply | undefined {
  if (typeof value !== 'object' || value === null || Array.isArray(value)) return undefined;
  const reply = value as Record<string, unknown>;
  if (reply.v !== 1 || reply.ok !== true || typeof reply.callId !== 'string' || !('output' in reply)) return undefined;
  return { v: 1, callId: reply.callId, ok: true, output: reply.output };
}

/** The headers of a call: msgpack, heartbeats asked for, the attempt when it is a repeat, and scrubbed output when asked. */
function callHeaders(attempt: number, scrubOutput: boolean): MsgHdrs {
  const extra = createHeaders();
  extra.set(ToolCallHeader.heartbeat, '1');
  if (attempt > 1) extra.set(ToolCallHeader.attempt, String(attempt));
  if (scrubOutput) extra.set(ToolCallHeader.scrubOutput, '1');
  return msgpackHeaders(extra);
}

function progressOnly(onProgress: (event: ToolCallEvent) => void): (event: ToolCallEvent) => void {
  return (event) => {
    if (event.kind === 'progress') onProgress(event);
  };
}

export type { ToolDescriptor, ToolCallEvent };
