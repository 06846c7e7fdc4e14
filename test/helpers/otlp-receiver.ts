import { createServer } from 'node:http';
import type { AddressInfo } from 'node:net';

/** One span as an OTLP/HTTP JSON export carries it, with its resource's `service.name` and its attributes flattened. */
export interface ReceivedSpan {
  readonly service: string;
  readonly traceId: string;
  readonly spanId: string;
  /** Empty for a root span. */
  readonly parentSpanId: string;
  readonly name: string;
  /** OTLP's numbering: 1 internal, 2 server, 3 client. */
  readonly kind: number;
  readonly attributes: Readonly<Record<string, unknown>>;
  /** OTLP's status code: 0 unset, 1 ok, 2 error. */
  readonly statusCode: number;
}

/** A local OTLP/HTTP receiver of JSON trace exports (`OTEL_EXPORTER_OTLP_PROTOCOL=http/json`), as a collector would be. */
export interface OtlpReceiver {
  /** The base URL to give as `OTEL_EXPORTER_OTLP_ENDPOINT` (exporters add `/v1/traces`). */
  readonly url: string;
  /** Every span received so far, in arrival order. */
  readonly spans: readonly ReceivedSpan[];
  /** Export requests that were not JSON trace exports, with why: a test expects none. */
  readonly rejected: readonly string[];
  close(): Promise<void>;
}

interface OtlpValue {
  stringValue?: string;
  boolValue?: boolean;
  intValue?: number | string;
  doubleValue?: number;
  arrayValue?: { values?: OtlpValue[] };
}

function valueOf(value: OtlpValue | undefined): unknown {
  if (!value) return undefined;
  if (value.stringValue !== undefined) return value.stringValue;
  if (value.boolValue !== undefined) return value.boolValue;
  if (value.intValue !== undefined) return Number(value.intValue);
  if (value.doubleValue !== undefined) return value.doubleValue;
  if (value.arrayValue) return (value.arrayValue.values ?? []).map(valueOf);
  return undefined;
}

function attributesOf(list: Array<{ key: string; value?: OtlpValue }> | undefined): Record<string, unknown> {
  return Object.fromEntries((list ?? []).map(({ key, value }) => [key, valueOf(value)]));
}

interface ExportRequest {
  resourceSpans?: Array<{
    resource?: { attributes?: Array<{ key: string; value?: OtlpValue }> };
    scopeSpans?: Array<{
      spans?: Array<{
        traceId: string;
        spanId: string;
        parentSpanId?: string;
        name: string;
        kind: number;
        attributes?: Array<{ key: string; value?: OtlpValue }>;
        status?: { code?: number };
      }>;
    }>;
  }>;
}

/** Starts the receiver on a free loopback port: `POST /v1/traces` with a JSON body, answered 200 `{}`. */
export async function startOtlpReceiver(): Promise<OtlpReceiver> {
  const spans: ReceivedSpan[] = [];
  const rejected: string[] = [];
  const server = createServer((request, response) => {
    const chunks: Buffer[] = [];
    request.on('data', (chunk: Buffer) => chunks.push(chunk));
    request.on('end', () => {
      const type = request.headers['content-type'] ?? '';
      if (request.method !== 'POST' || request.url !== '/v1/traces' || !type.startsWith('application/json')) {
        rejected.push(`${request.method} ${request.url} ${type}`);
        response.writeHead(404).end();
        return;
      }
      try {
        const body = JSON.parse(Buffer.concat(chunks).toString('utf8')) as ExportRequest;
        for (const resourceSpans of body.resourceSpans ?? []) {
          const service = String(attributesOf(resourceSpans.resource?.attributes)['service.name']);
          for (const scope of resourceSpans.scopeSpans ?? []) {
            for (const span of scope.spans ?? []) {
              spans.push({
                service,
                traceId: span.traceId,
                spanId: span.spanId,
                parentSpanId: span.parentSpanId ?? '',
                name: span.name,
                kind: span.kind,
                attributes: attributesOf(span.attributes),
                statusCode: span.status?.code ?? 0,
              });
            }
          }
        }
        response.writeHead(200, { 'content-type': 'application/json' }).end('{}');
      } catch (err) {
        rejected.push(`unreadable export: ${(err as Error).message}`);
        response.writeHead(400).end();
      }
    });
  });
  await new Promise<void>((resolve) => server.listen(0, '127.0.0.1', resolve));
  const { port } = server.address() as AddressInfo;
  return {
    url: `http://127.0.0.1:${port}`,
    spans,
    rejected,
    close: () =>
      new Promise<void>((resolve) => {
        server.closeAllConnections();
        server.close(() => resolve());
      }),
  };
}
