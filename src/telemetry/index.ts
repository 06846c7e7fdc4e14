// OpenTelemetry tracing across the bus: off unless the standard `OTEL_*` variables ask for it (see
// `tracingEnvOf`), and then loaded by dynamic import. Every hook below is a no-op while tracing is off.
export { startTracing } from './start-tracing.ts';
export type { StartTracingOptions, Tracing } from './start-tracing.ts';
export { OtlpProtocol, TraceExporterName, tracingEnvOf } from './tracing-env.ts';
export type { TracingEnv } from './tracing-env.ts';
export { relayedTraceContext, traceContextOfHeaders } from './tracing-state.ts';
export { traceStep, traceTurnEnd, traceTurnStart } from './turn-traces.ts';
export type { TurnTraceEnd, TurnTraceStart } from './turn-traces.ts';
export { traceMemoryCall, traceProviderCall, traceToolCall } from './call-traces.ts';
export type { ProviderCallTrace, RequestTrace } from './call-traces.ts';
export { traceEndpointServed, traceGenerate, traceToolServed } from './serve-traces.ts';
export type { GenerateTrace, TracedChunkWriter } from './serve-traces.ts';
export { GenAiOperation, SpanAttribute } from './attributes.ts';
