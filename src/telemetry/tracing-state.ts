import type * as OtelApi from '@opentelemetry/api';
import type { MsgHdrs } from '@nats-io/nats-core';
import { TRACEPARENT_PATTERN, TraceHeader } from '../protocol/index.ts';
import type { TraceContext } from '../protocol/index.ts';

/** The `@opentelemetry/api` module, loaded only once tracing starts. */
export type Api = typeof OtelApi;

/** Tracing as a process runs it: the API and this service's tracer. */
export interface ActiveTracing {
  readonly api: Api;
  readonly tracer: OtelApi.Tracer;
}

// One per process, like OpenTelemetry's own global tracer provider: every service runs as its own process
// (`runService`), which starts tracing once. Undefined (the default) means tracing is off, and every hook of this
// folder returns at once without touching the OpenTelemetry packages, none of which is then even loaded.
let active: ActiveTracing | undefined;

/** The process's tracing, or undefined when it is off. */
export function activeTracing(): ActiveTracing | undefined {
  return active;
}

/** Sets (or, with undefined, clears) the process's tracing; `startTracing` calls it. */
export function setActiveTracing(tracing: ActiveTracing | undefined): void {
  active = tracing;
}

const headerGetter: OtelApi.TextMapGetter<MsgHdrs> = {
  get: (carrier, key) => carrier.get(key) || undefined,
  keys: (carrier) => carrier.keys(),
};
const headerSetter: OtelApi.TextMapSetter<MsgHdrs> = {
  set: (carrier, key, value) => carrier.set(key, value),
};

/** The context a message's `traceparent`/`tracestate` headers name, or the root context when they name none. */
export function contextOfHeaders(tracing: ActiveTracing, headers: MsgHdrs | undefined): OtelApi.Context {
  const { api } = tracing;
  return headers ? api.propagation.extract(api.ROOT_CONTEXT, headers, headerGetter) : api.ROOT_CONTEXT;
}

/** The context a logged {@link TraceContext} names, or the root context for none. */
export function contextOfLogged(tracing: ActiveTracing, trace: TraceContext | undefined): OtelApi.Context {
  const { api } = tracing;
  return trace ? api.propagation.extract(api.ROOT_CONTEXT, { ...trace }, api.defaultTextMapGetter) : api.ROOT_CONTEXT;
}

/** Writes `context`'s `traceparent` (and `tracestate`) into `headers`, and returns them. */
export function injectHeaders(tracing: ActiveTracing, context: OtelApi.Context, headers: MsgHdrs): MsgHdrs {
  tracing.api.propagation.inject(context, headers, headerSetter);
  return headers;
}

/** `context` as a {@link TraceContext} to log, or undefined when it holds no valid span. */
export function loggedContextOf(tracing: ActiveTracing, context: OtelApi.Context): TraceContext | undefined {
  const carrier: Record<string, string> = {};
  tracing.api.propagation.inject(context, carrier, tracing.api.defaultTextMapSetter);
  const traceparent = carrier[TraceHeader.traceparent];
  if (!traceparent) return undefined;
  const tracestate = carrier[TraceHeader.tracestate];
  return tracestate ? { traceparent, tracestate } : { traceparent };
}

/**
 * The trace context a message's headers carry, to log with what it asks for; undefined when tracing is off or
 * the message carries no valid `traceparent`.
 */
export function traceContextOfHeaders(headers: MsgHdrs | undefined): TraceContext | undefined {
  return active ? relayedTraceContext(headers) : undefined;
}

/**
 * The trace context a message's headers carry, whether or not this process traces: for a relay (the agents
 * host) that hands its caller's context on to the request it makes, so that the turn joins the caller's trace.
 * Undefined when the message carries no valid `traceparent`; `tracestate` is cut to 512 characters.
 */
export function relayedTraceContext(headers: MsgHdrs | undefined): TraceContext | undefined {
  if (!headers) return undefined;
  const traceparent = headers.get(TraceHeader.traceparent).trim();
  if (!TRACEPARENT_PATTERN.test(traceparent)) return undefined;
  const tracestate = headers.get(TraceHeader.tracestate).trim().slice(0, 512);
  return tracestate ? { traceparent, tracestate } : { traceparent };
}

/** Sets a span's status to error with the error's code as `error.type`, as the semantic conventions ask. */
export function markFailed(tracing: ActiveTracing, span: OtelApi.Span, error: { readonly code: string; readonly message: string }): void {
  span.setAttribute('error.type', error.code);
  span.setStatus({ code: tracing.api.SpanStatusCode.ERROR, message: error.message.slice(0, 500) });
}
