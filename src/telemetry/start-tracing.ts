import type { Logger } from '../logging.ts';
import { setActiveTracing } from './tracing-state.ts';
import { OtlpProtocol, TraceExporterName, tracingEnvOf } from './tracing-env.ts';

/** A process's tracing, as {@link startTracing} started it. */
export interface Tracing {
  /** False when the environment left tracing off: nothing was loaded, and `shutdown` does nothing. */
  readonly enabled: boolean;
  /** Exports the spans still buffered and stops; the hooks of this folder are no-ops after it. */
  shutdown(): Promise<void>;
}

/** Options of {@link startTracing}. */
export interface StartTracingOptions {
  /** The `service.name` of this process's spans: `agentbus-runtime`, `agentbus-provider`, … */
  readonly serviceName: string;
  /** Default `process.env`. The SDK itself reads the other `OTEL_*` variables from `process.env`. */
  readonly env?: NodeJS.ProcessEnv;
  readonly logger: Logger;
}

const OFF: Tracing = { enabled: false, shutdown: async () => {} };

/**
 * Starts OpenTelemetry tracing for this process when the environment asks for it (see `tracingEnvOf`), and does
 * nothing otherwise: the SDK is loaded by dynamic import only then, so a process without tracing never loads
 * it. Spans go out over OTLP/HTTP (`OTEL_EXPORTER_OTLP_*`: endpoint, headers, timeout, protocol) and/or to the
 * console, batched (`OTEL_BSP_*`), sampled as `OTEL_TRACES_SAMPLER` says (default: parent-based, always on). The
 * resource is `OTEL_RESOURCE_ATTRIBUTES` with `service.name` set to `serviceName`: every agentbus process is
 * told apart by it even where they share one environment (`agentbus up`), so `OTEL_SERVICE_NAME` does not
 * override it. Trace context travels as W3C `traceparent`/`tracestate` (and `baggage`).
 *
 * @example
 * const tracing = await startTracing({ serviceName: 'agentbus-runtime', logger });
 * // … on stop:
 * await tracing.shutdown();
 */
export async function startTracing(options: StartTracingOptions): Promise<Tracing> {
  const { logger } = options;
  const settings = tracingEnvOf(options.env ?? process.env);
  if (settings.exporters.length === 0) return OFF;
  if (settings.unsupported.length > 0) logger.warn({ unsupported: settings.unsupported }, 'tracing: not supported here (OTLP over http/protobuf or http/json, console); using what is');
  const [api, core, resources, sdk, contextHooks] = await Promise.all([
    import('@opentelemetry/api'),
    import('@opentelemetry/core'),
    import('@opentelemetry/resources'),
    import('@opentelemetry/sdk-trace-base'),
    import('@opentelemetry/context-async-hooks'),
  ]);
  // The SDK's own troubles (an exporter that cannot reach its collector) go to the service's log, not to nowhere.
  api.diag.setLogger(
    {
      error: (message, ...args) => logger.warn({ args: args.map(String) }, `tracing: ${message}`),
      warn: (message, ...args) => logger.warn({ args: args.map(String) }, `tracing: ${message}`),
      info: () => {},
      debug: () => {},
      verbose: () => {},
    },
    { logLevel: api.DiagLogLevel.WARN, suppressOverrideMessage: true },
  );
  const spanProcessors = [];
  for (const name of settings.exporters) {
    if (name === TraceExporterName.console) spanProcessors.push(new sdk.SimpleSpanProcessor(new sdk.ConsoleSpanExporter()));
    else {
      const { OTLPTraceExporter } = settings.protocol === OtlpProtocol.json ? await import('@opentelemetry/exporter-trace-otlp-http') : await import('@opentelemetry/exporter-trace-otlp-proto');
      spanProcessors.push(new sdk.BatchSpanProcessor(new OTLPTraceExporter()));
    }
  }
  const resource = resources
    .defaultResource()
    .merge(resources.detectResources({ detectors: [resources.envDetector] }))
    .merge(resources.resourceFromAttributes({ 'service.name': options.serviceName }));
  const provider = new sdk.BasicTracerProvider({ resource, spanProcessors });
  api.trace.setGlobalTracerProvider(provider);
  // Active contexts follow async calls: a library that traces itself (the Anthropic SDK does) nests its spans
  // under the span of the provider call it runs in.
  api.context.setGlobalContextManager(new contextHooks.AsyncLocalStorageContextManager().enable());
  api.propagation.setGlobalPropagator(new core.CompositePropagator({ propagators: [new core.W3CTraceContextPropagator(), new core.W3CBaggagePropagator()] }));
  setActiveTracing({ api, tracer: provider.getTracer('agentbus') });
  logger.info({ exporters: settings.exporters, protocol: settings.protocol, serviceName: options.serviceName }, 'tracing on');
  return {
    enabled: true,
    async shutdown() {
      setActiveTracing(undefined);
      try {
        await provider.shutdown();
      } catch (err) {
        logger.warn({ err }, 'tracing: spans not exported at shutdown');
      }
    },
  };
}
