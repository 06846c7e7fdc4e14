/** Where a process sends its spans, as the standard `OTEL_*` variables say. */
export interface TracingEnv {
  /** The exporters to run: `otlp` (OTLP over HTTP) and/or `console`. Empty: tracing is off. */
  readonly exporters: readonly TraceExporterName[];
  /** The OTLP protocol: `http/protobuf` (the OTLP default) or `http/json`. */
  readonly protocol: OtlpProtocol;
  /** Names in `OTEL_TRACES_EXPORTER` or protocols this build does not ship, to warn about. */
  readonly unsupported: readonly string[];
}

export const TraceExporterName = { otlp: 'otlp', console: 'console' } as const;
export type TraceExporterName = (typeof TraceExporterName)[keyof typeof TraceExporterName];

export const OtlpProtocol = { protobuf: 'http/protobuf', json: 'http/json' } as const;
export type OtlpProtocol = (typeof OtlpProtocol)[keyof typeof OtlpProtocol];

/**
 * Reads whether and how to trace. Tracing is on when `OTEL_EXPORTER_OTLP_ENDPOINT` or
 * `OTEL_EXPORTER_OTLP_TRACES_ENDPOINT` is set, or `OTEL_TRACES_EXPORTER` names an exporter; it stays off with
 * `OTEL_TRACES_EXPORTER=none` or `OTEL_SDK_DISABLED=true`. `OTEL_EXPORTER_OTLP_TRACES_PROTOCOL` (else
 * `OTEL_EXPORTER_OTLP_PROTOCOL`) picks `http/protobuf` (default) or `http/json`; `grpc` is not shipped and falls
 * back to `http/protobuf` with a warning.
 *
 * @example
 * tracingEnvOf({ OTEL_EXPORTER_OTLP_ENDPOINT: 'http://collector:4318' }).exporters; // ['otlp']
 * tracingEnvOf({}).exporters; // []: off
 */
export function tracingEnvOf(env: NodeJS.ProcessEnv): TracingEnv {
  const unsupported: string[] = [];
  const protocolName = (env.OTEL_EXPORTER_OTLP_TRACES_PROTOCOL?.trim() || env.OTEL_EXPORTER_OTLP_PROTOCOL?.trim() || OtlpProtocol.protobuf).toLowerCase();
  const protocol = protocolName === OtlpProtocol.json ? OtlpProtocol.json : OtlpProtocol.protobuf;
  if (protocolName !== OtlpProtocol.json && protocolName !== OtlpProtocol.protobuf) unsupported.push(`protocol ${protocolName}`);
  if (env.OTEL_SDK_DISABLED?.trim().toLowerCase() === 'true') return { exporters: [], protocol, unsupported: [] };
  const named = (env.OTEL_TRACES_EXPORTER ?? '')
    .split(',')
    .map((name) => name.trim().toLowerCase())
    .filter((name) => name !== '');
  if (named.includes('none')) return { exporters: [], protocol, unsupported: [] };
  if (named.length === 0) {
    const endpoint = env.OTEL_EXPORTER_OTLP_TRACES_ENDPOINT?.trim() || env.OTEL_EXPORTER_OTLP_ENDPOINT?.trim();
    return { exporters: endpoint ? [TraceExporterName.otlp] : [], protocol, unsupported };
  }
  const exporters = new Set<TraceExporterName>();
  for (const name of named) {
    if (name === TraceExporterName.otlp || name === TraceExporterName.console) exporters.add(name);
    else unsupported.push(`exporter ${name}`);
  }
  return { exporters: [...exporters], protocol, unsupported };
}
