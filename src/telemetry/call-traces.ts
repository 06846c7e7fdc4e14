import type { MsgHdrs } from '@nats-io/nats-core';
import type { Span } from '@opentelemetry/api';
import { toErrorData } from '../errors.ts';
import type { ErrorData } from '../errors.ts';
import type { GenerateChunk, GenerateRequest, ToolCallRequest } from '../protocol/index.ts';
import { GenAiOperation, SpanAttribute, modelAttributes, scopeAttributes } from './attributes.ts';
import { activeTracing, injectHeaders, markFailed } from './tracing-state.ts';
import type { ActiveTracing } from './tracing-state.ts';
import { turnContext } from './turn-traces.ts';

/** The span of one request the process sends over the bus, as its client sees it. */
export interface RequestTrace {
  /** True when tracing is off: `inject` adds nothing, and headers shared between requests may be sent as they are. */
  readonly untraced: boolean;
  /** Adds the request's trace context (`traceparent`, `tracestate`) to its headers, and returns them. */
  inject(headers: MsgHdrs): MsgHdrs;
  /**
   * Ends the span when `reply` settles: failed when it rejects, or when `failure` finds an error in its value (a
   * tool's `{ ok: false, error }`). Resolves and rejects as `reply` does.
   */
  settle<T>(reply: Promise<T>, failure?: (value: T) => ErrorData | undefined): Promise<T>;
}

/** The span of one provider call, as the runtime sees it. */
export interface ProviderCallTrace extends Pick<RequestTrace, 'inject' | 'untraced'> {
  /** Passes the call's chunks on, noting usage, the model that answered and the finish reason; the span ends with them. */
  watch(chunks: AsyncIterable<GenerateChunk>): AsyncIterable<GenerateChunk>;
}

const UNTRACED: RequestTrace & ProviderCallTrace = {
  untraced: true,
  inject: (headers) => headers,
  settle: (reply) => reply,
  watch: (chunks) => chunks,
};

/**
 * Traces one provider call (`chat <model>`, a client span; with tracing off a no-op): a child of its turn's
 * current step, found by the request's `turnId`, with the GenAI attributes of the request and, as the chunks
 * come, of the answer.
 *
 * @example
 * const trace = traceProviderCall(request);
 * for await (const chunk of trace.watch(stream(request, trace))) …
 */
export function traceProviderCall(request: GenerateRequest): ProviderCallTrace {
  const tracing = activeTracing();
  if (!tracing) return UNTRACED;
  const model = modelAttributes(request.model);
  const span = tracing.tracer.startSpan(
    `${GenAiOperation.chat} ${model[SpanAttribute.requestModel]}`,
    {
      kind: tracing.api.SpanKind.CLIENT,
      attributes: {
        [SpanAttribute.operationName]: GenAiOperation.chat,
        ...model,
        ...(request.maxTokens === undefined ? {} : { [SpanAttribute.requestMaxTokens]: request.maxTokens }),
        ...(request.temperature === undefined ? {} : { [SpanAttribute.requestTemperature]: request.temperature }),
        ...scopeAttributes(request),
      },
    },
    turnContext(request.turnId),
  );
  const context = tracing.api.trace.setSpan(tracing.api.ROOT_CONTEXT, span);
  return {
    untraced: false,
    inject: (headers) => injectHeaders(tracing, context, headers),
    watch: (chunks) => watchChunks(tracing, span, chunks),
  };
}

async function* watchChunks(tracing: ActiveTracing, span: Span, chunks: AsyncIterable<GenerateChunk>): AsyncGenerator<GenerateChunk, void, undefined> {
  try {
    for await (const chunk of chunks) {
      noteChunk(span, chunk);
      yield chunk;
    }
  } catch (error) {
    markFailed(tracing, span, toErrorData(error));
    throw error;
  } finally {
    span.end();
  }
}

/** Records what a provider chunk says about the answer on its span: usage, finish reason, model, retries. */
export function noteChunk(span: Span, chunk: Pick<GenerateChunk, 'type'> & Partial<Record<string, unknown>>): void {
  switch (chunk.type) {
    case 'usage': {
      const usage = chunk.usage as { inputTokens: number; outputTokens: number };
      span.setAttribute(SpanAttribute.inputTokens, usage.inputTokens);
      span.setAttribute(SpanAttribute.outputTokens, usage.outputTokens);
      break;
    }
    case 'done':
      span.setAttribute(SpanAttribute.responseFinishReasons, [String(chunk.finishReason)]);
      if (typeof chunk.model === 'string') span.setAttribute(SpanAttribute.responseModel, modelAttributes(chunk.model)[SpanAttribute.requestModel]!);
      if (typeof chunk.cost === 'number') span.setAttribute(SpanAttribute.cost, chunk.cost);
      break;
    case 'retry': {
      const error = chunk.error as ErrorData;
      span.addEvent('retry', { attempt: Number(chunk.attempt), [SpanAttribute.errorType]: error.code });
      break;
    }
  }
}

/**
 * Traces one tool call attempt (`execute_tool <name>`, a client span; a no-op with tracing off): a child of its
 * turn's current step, named by the model's call id (`gen_ai.tool.call.id`) and this attempt's `callId`.
 */
export function traceToolCall(request: ToolCallRequest, attempt: number): RequestTrace {
  const tracing = activeTracing();
  if (!tracing) return UNTRACED;
  const span = tracing.tracer.startSpan(
    `${GenAiOperation.executeTool} ${request.name}`,
    {
      kind: tracing.api.SpanKind.CLIENT,
      attributes: {
        [SpanAttribute.operationName]: GenAiOperation.executeTool,
        [SpanAttribute.toolName]: request.name,
        [SpanAttribute.toolType]: 'function',
        ...(request.toolCallId ? { [SpanAttribute.toolCallId]: request.toolCallId } : {}),
        [SpanAttribute.callId]: request.callId,
        [SpanAttribute.attempt]: attempt,
        ...scopeAttributes(request),
      },
    },
    turnContext(request.turnId),
  );
  return requestTrace(tracing, span);
}

/**
 * Traces a request to memory made for a turn (`search_memory`, a client span); a no-op with tracing off or
 * without a turn.
 */
export function traceMemoryCall(operation: string, scope: { readonly tenant: string; readonly turnId?: string | undefined }): RequestTrace {
  const tracing = activeTracing();
  if (!tracing || scope.turnId === undefined) return UNTRACED;
  const span = tracing.tracer.startSpan(
    operation,
    { kind: tracing.api.SpanKind.CLIENT, attributes: { [SpanAttribute.operationName]: operation, ...scopeAttributes(scope) } },
    turnContext(scope.turnId),
  );
  return requestTrace(tracing, span);
}

function requestTrace(tracing: ActiveTracing, span: Span): RequestTrace {
  const context = tracing.api.trace.setSpan(tracing.api.ROOT_CONTEXT, span);
  return {
    untraced: false,
    inject: (headers) => injectHeaders(tracing, context, headers),
    async settle(reply, failure) {
      try {
        const value = await reply;
        const error = failure?.(value);
        if (error) markFailed(tracing, span, error);
        return value;
      } catch (error) {
        markFailed(tracing, span, toErrorData(error));
        throw error;
      } finally {
        span.end();
      }
    },
  };
}
