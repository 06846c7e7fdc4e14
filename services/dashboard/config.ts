import { InvalidInputError } from '../../src/errors.ts';
import { parsePort } from '../../src/service/http-basics.ts';

export { parsePort };
import { parseTraceUrl } from './trace-links.ts';

/** The dashboard's default port. */
export const DEFAULT_DASHBOARD_PORT = 4280;

/** How the dashboard serves. */
export interface DashboardConfig {
  /** Address to bind; loopback unless told otherwise. */
  readonly host: string;
  /** 0 picks a free port. */
  readonly port: number;
  /** When set, every request must carry it. */
  readonly token?: string;
  /** Where a trace is shown (`http://jaeger:16686/trace/{traceId}`): the session page links each turn's trace there. */
  readonly traceUrl?: string;
}

/**
 * Reads the dashboard's settings: `AGENTBUS_DASHBOARD_PORT` (default 4280), `AGENTBUS_DASHBOARD_HOST`
 * (default 127.0.0.1), `AGENTBUS_DASHBOARD_TOKEN` (none by default) and `AGENTBUS_TRACE_URL` (none by default).
 */
export function readDashboardConfig(env: NodeJS.ProcessEnv): DashboardConfig {
  const port = env.AGENTBUS_DASHBOARD_PORT === undefined ? DEFAULT_DASHBOARD_PORT : parsePort(env.AGENTBUS_DASHBOARD_PORT, 'AGENTBUS_DASHBOARD_PORT');
  const host = env.AGENTBUS_DASHBOARD_HOST?.trim() || '127.0.0.1';
  const token = env.AGENTBUS_DASHBOARD_TOKEN?.trim();
  if (token !== undefined && token !== '' && token.length < 8) throw new InvalidInputError('AGENTBUS_DASHBOARD_TOKEN must be at least 8 characters');
  const traceUrl = env.AGENTBUS_TRACE_URL?.trim() ? parseTraceUrl(env.AGENTBUS_TRACE_URL) : undefined;
  return { host, port, ...(token ? { token } : {}), ...(traceUrl ? { traceUrl } : {}) };
}
