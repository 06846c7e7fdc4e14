import type { MsgHdrs } from '@nats-io/nats-core';
import type { ErrorData } from '../errors.ts';
import { TraceHeader } from '../protocol/index.ts';
import type { ChunkBody, ToolCallReply, ToolCallRequest } from '../protocol/index.ts';
import { GenAiOperation, SpanAttribute, scopeAttributes } from './attributes.ts';
import { noteChunk } from './call-traces.ts';
import { activeTracing, contextOfHeaders, markFailed } from './tracing-state.ts';

/** A provider answer's chunk writer, as the provider host has it (`services/provider/chunk-writer.ts`). */
export interface TracedChunkWriter {
  write(body: ChunkBody): boolean;
  fail(error: ErrorData): boolean;
  readonly ended: boolean;
  readonly nextSeq: number;
}

/** The span of one provider request a provider instance serves. */
export interface GenerateTrace {
  /** The writer, watched: what its chunks say of the answer goes on the span, which ends with the stream. */
  watch(writer: TracedChunkWriter): TracedChunkWriter;
  /** Runs `work` (the adapter's call) with the span active, so that a library tracing itself nests under it. */
  run<T>(work: () => T): T;
}

const UNTRACED: GenerateTrace = {
  watch: (writer) => writer,
  run: (work) => work(),
};

/**
 * Traces one provider request on the provider's side (`chat <model>`, a server span; a no-op with tracing off):
 * a child of the caller's span named by the request's `traceparent` header.
 *
 * @example
 * const trace = traceGenerate(message.headers, adapter.name, request);
 * const writer = trace.watch(createChunkWriter({ nc, codec, replySubject, requestId }));
 * trace.run(() => run(adapter, request, writer, controller, logger));
 */
export function traceGenerate(
  headers: MsgHdrs | undefined,
  provider: string,
  request: { readonly model: string; readonly maxTokens?: number; readonly temperature?: number; readonly tenant?: string; readonly sessionId?: string; readonly turnId?: string },
): GenerateTrace {
  const tracing = activeTracing();
  if (!tracing) return UNTRACED;
  const { api } = tracing;
  const span = tracing.tracer.startSpan(
    `${GenAiOperation.chat} ${request.model}`,
    {
      kind: api.SpanKind.SERVER,
      attributes: {
        [SpanAttribute.operationName]: GenAiOperation.chat,
        [SpanAttribute.providerName]: provider,
        [SpanAttribute.requestModel]: request.model,
        ...(request.maxTokens === undefined ? {} : { [SpanAttribute.requestMaxTokens]: request.maxTokens }),
        ...(request.temperature === undefined ? {} : { [SpanAttribute.requestTemperature]: request.temperature }),
        ...scopeAttributes(request),
      },
    },
    contextOfHeaders(tracing, headers),
  );
  const context = api.trace.setSpan(api.ROOT_CONTEXT, span);
  let open = true;
  const end = (error?: ErrorData) => {
    if (!open) return;
    open = false;
    if (error) markFailed(tracing, span, error);
    span.end();
  };
  return {
    watch: (writer) => ({
      write(body) {
        const written = writer.write(body);
        if (written) {
          noteChunk(span, body);
          if (body.type === 'error') end(body.error);
          else if (body.type === 'done') end();
        }
        return written;
      },
      fail(error) {
        const failed = writer.fail(error);
        if (failed) end(error);
        return failed;
      },
      get ended() {
        return writer.ended;
      },
      get nextSeq() {
        return writer.nextSeq;
      },
    }),
    run: (work) => api.context.with(context, work),
  };
}

/**
 * Records a tool call a worker answered (`execute_tool <name>`, a server span from `startedAt` to now; nothing
 * with tracing off): a child of the caller's span named by the call's `traceparent` header, failed with the
 * error's code when the reply is one.
 */
export function traceToolServed(headers: MsgHdrs | undefined, tool: string, request: ToolCallRequest | undefined, reply: ToolCallReply, startedAt: number): void {
  const tracing = activeTracing();
  if (!tracing) return;
  const span = tracing.tracer.startSpan(
    `${GenAiOperation.executeTool} ${tool}`,
    {
      kind: tracing.api.SpanKind.SERVER,
      startTime: startedAt,
      attributes: {
        [SpanAttribute.operationName]: GenAiOperation.executeTool,
        [SpanAttribute.toolName]: tool,
        [SpanAttribute.toolType]: 'function',
        ...(request?.toolCallId ? { [SpanAttribute.toolCallId]: request.toolCallId } : {}),
        ...(request ? { [SpanAttribute.callId]: request.callId, ...scopeAttributes(request) } : {}),
      },
    },
    contextOfHeaders(tracing, headers),
  );
  if (!reply.ok) markFailed(tracing, span, reply.error);
  span.end();
}

/**
 * Records a request an endpoint answered (a server span named `name`, from `startedAt`, a `performance.now()`
 * reading, to now), when tracing is on and the request carries a `traceparent`: requests outside any trace (state
 * reads, session lists) make no spans of their own.
 */
export function traceEndpointServed(headers: MsgHdrs | undefined, name: string, endpoint: string, startedAt: number, error?: ErrorData): void {
  const tracing = activeTracing();
  if (!tracing || !headers?.has(TraceHeader.traceparent)) return;
  const span = tracing.tracer.startSpan(
    name,
    {
      kind: tracing.api.SpanKind.SERVER,
      startTime: performance.timeOrigin + startedAt,
      attributes: { [SpanAttribute.operationName]: name, [SpanAttribute.endpoint]: endpoint },
    },
    contextOfHeaders(tracing, headers),
  );
  if (error) markFailed(tracing, span, error);
  span.end();
}

