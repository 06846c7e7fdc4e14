import { InvalidInputError } from '../../src/errors.ts';
import { LogEventType, traceIdOf } from '../../src/protocol/index.ts';
import type { LogEvent } from '../../src/protocol/index.ts';

/** The placeholder of `AGENTBUS_TRACE_URL` that a trace id replaces. */
export const TRACE_ID_PLACEHOLDER = '{traceId}';

/** One turn's trace, as the session page shows it. */
export interface TraceLink {
  readonly turnId: string;
  readonly traceId: string;
  /** The trace in the tracing UI, when `AGENTBUS_TRACE_URL` is set. */
  readonly url?: string;
}

/**
 * Checks a trace link template: an http(s) URL holding `{traceId}`, such as `http://jaeger:16686/trace/{traceId}`.
 * Throws {@link InvalidInputError} saying what is wrong.
 */
export function parseTraceUrl(template: string): string {
  const value = template.trim();
  let url: URL | undefined;
  try {
    url = new URL(value.replace(TRACE_ID_PLACEHOLDER, '0'));
  } catch {
    url = undefined;
  }
  if (!url || (url.protocol !== 'http:' && url.protocol !== 'https:') || !value.includes(TRACE_ID_PLACEHOLDER)) {
    throw new InvalidInputError(`AGENTBUS_TRACE_URL must be an http(s) URL holding ${TRACE_ID_PLACEHOLDER} (e.g. http://jaeger:16686/trace/${TRACE_ID_PLACEHOLDER}), got ${JSON.stringify(template)}`);
  }
  return value;
}

/**
 * The trace of each turn of a session's log, oldest first: the trace id its `turn.started` logged (tracing on),
 * with its link when a template is given. A resumed turn logs nothing new: its trace is the one logged.
 *
 * @example
 * traceLinks(log, 'http://jaeger:16686/trace/{traceId}');
 * // [{ turnId: 't1', traceId: '4bf9…4736', url: 'http://jaeger:16686/trace/4bf9…4736' }]
 */
export function traceLinks(log: readonly LogEvent[], template?: string): TraceLink[] {
  const links: TraceLink[] = [];
  for (const event of log) {
    if (event.type !== LogEventType.turnStarted || !event.turnId) continue;
    const traceId = traceIdOf(event.data.trace?.traceparent);
    if (!traceId) continue;
    links.push({ turnId: event.turnId, traceId, ...(template ? { url: template.replaceAll(TRACE_ID_PLACEHOLDER, traceId) } : {}) });
  }
  return links;
}
