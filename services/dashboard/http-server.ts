import { readFile, readdir } from 'node:fs/promises';
import { createServer } from 'node:http';
import type { IncomingMessage, Server, ServerResponse } from 'node:http';
import { extname, join } from 'node:path';
import type { Logger } from '../../src/logging.ts';
import { HttpError, isLoopbackHost, sameSecret, sendJson as sendJsonBody } from '../../src/service/http-basics.ts';
import { isToken } from '../../src/protocol/index.ts';
import type { EventHub } from './event-hub.ts';
import type { SessionRead } from './session-reader.ts';

/** What the HTTP server serves, injected. */
export interface DashboardRoutes {
  fleet(): unknown;
  workers(): unknown;
  /** Sessions that have a log. */
  sessions(): Promise<unknown>;
  /** A session read back, or undefined when the bus has nothing of it. */
  session(tenant: string, sessionId: string, signal: AbortSignal): Promise<SessionRead | undefined>;
  /** The JSON view of a session read back (events and path). */
  sessionView(read: SessionRead): unknown;
  /** A machine drawn as SVG and its layout as JSON, by name (`turn`, `session`). */
  machine(name: string): { svg: string; json: unknown } | undefined;
  /** What the page needs to know of the dashboard's settings (`traceUrl`). */
  config(): unknown;
  /** Forks a session (the timeline's "fork here"): the body is the request's JSON; rejects with an `HttpError`. */
  fork(tenant: string, sessionId: string, body: Uint8Array): Promise<{ sessionId: string; atSeq: number }>;
}

/** The most bytes a fork request's body may have. */
const MAX_FORK_BODY = 4096;

/** Reads a small request body; 413 past `max` bytes. */
async function readBody(request: IncomingMessage, max: number): Promise<Uint8Array> {
  const chunks: Buffer[] = [];
  let size = 0;
  for await (const chunk of request as AsyncIterable<Buffer>) {
    size += chunk.byteLength;
    if (size > max) throw new HttpError(413, 'payload_too_large', `a request body may have at most ${max} bytes`);
    chunks.push(chunk);
  }
  return Buffer.concat(chunks);
}

/** Options of {@link createDashboardHttpServer}. */
export interface DashboardHttpOptions {
  readonly routes: DashboardRoutes;
  readonly hub: EventHub;
  readonly staticDir: string;
  readonly logger: Logger;
  /** When set, every request must carry it: `?token=`, `Authorization: Bearer`, or the cookie the page sets. */
  readonly token?: string;
  /** Requests must name a loopback Host (no DNS rebinding from a web page): bound to loopback, or without a token. */
  readonly loopbackOnly: boolean;
}

const CONTENT_TYPES: Record<string, string> = {
  '.html': 'text/html; charset=utf-8',
  '.js': 'text/javascript; charset=utf-8',
  '.css': 'text/css; charset=utf-8',
  '.svg': 'image/svg+xml',
};
const COOKIE = 'agentbus_dashboard_token';
const SECURITY_HEADERS = {
  'X-Content-Type-Options': 'nosniff',
  'Referrer-Policy': 'no-referrer',
  'X-Frame-Options': 'DENY',
  'Content-Security-Policy': "default-src 'self'; style-src 'self' 'unsafe-inline'; img-src 'self' data:; connect-src 'self'; frame-ancestors 'none'",
};

function cookieToken(request: IncomingMessage): string | undefined {
  for (const part of (request.headers.cookie ?? '').split(';')) {
    const [name, ...value] = part.trim().split('=');
    if (name === COOKIE) return decodeURIComponent(value.join('='));
  }
  return undefined;
}

function sendJson(response: ServerResponse, status: number, body: unknown, extra: Record<string, string> = {}): void {
  sendJsonBody(response, status, body, { ...SECURITY_HEADERS, ...extra });
}

function sessionPath(parts: readonly string[]): { tenant: string; sessionId: string } {
  const [tenant, sessionId] = parts;
  if (!isToken(tenant) || !isToken(sessionId)) {
    throw new HttpError(400, 'invalid_input', 'tenant and session id must match [A-Za-z0-9_-]{1,64}');
  }
  return { tenant, sessionId };
}

/**
 * Creates the dashboard's HTTP server (not yet listening): the page and its static files, a JSON API
 * (`/api/fleet`, `/api/workers`, `/api/config`, `/api/sessions`, `/api/sessions/<t>/<sid>`, its `log.ndjson` and
 * `log.json` downloads, `/api/machines/<name>.svg|.json`) and the server-sent events stream `/api/events`.
 * Only GET and HEAD, but `POST /api/sessions/<t>/<sid>/fork` (JSON `{ atSeq? }` → `{ sessionId, atSeq }`, the runtime's
 * refusals as their HTTP status); unknown paths get 404, bad ids 400, a missing or wrong token 401, all as JSON
 * `{ error: { code, message } }`.
 */
export async function createDashboardHttpServer(options: DashboardHttpOptions): Promise<Server> {
  const files = new Map<string, { type: string; body: Buffer }>();
  for (const name of await readdir(options.staticDir)) {
    const type = CONTENT_TYPES[extname(name)];
    if (type) files.set(name, { type, body: await readFile(join(options.staticDir, name)) });
  }

  const authorized = (request: IncomingMessage, url: URL): { ok: boolean; fromQuery: boolean } => {
    if (options.token === undefined) return { ok: true, fromQuery: false };
    const query = url.searchParams.get('token');
    if (query !== null) return { ok: sameSecret(query, options.token), fromQuery: true };
    const header = request.headers.authorization;
    if (header?.startsWith('Bearer ')) return { ok: sameSecret(header.slice('Bearer '.length), options.token), fromQuery: false };
    const cookie = cookieToken(request);
    return { ok: cookie !== undefined && sameSecret(cookie, options.token), fromQuery: false };
  };

  async function handle(request: IncomingMessage, response: ServerResponse): Promise<void> {
    if (options.loopbackOnly && !isLoopbackHost(request.headers.host)) {
      throw new HttpError(403, 'denied', 'this dashboard answers only requests addressed to a loopback host (127.0.0.1, localhost)');
    }
    let url: URL;
    try {
      url = new URL(request.url ?? '/', 'http://dashboard.invalid');
    } catch {
      throw new HttpError(400, 'invalid_input', 'malformed request URL');
    }
    // The one write: forking a session (`POST /api/sessions/<t>/<sid>/fork`). Everything else only reads.
    const forking = /^\/api\/sessions\/[^/]+\/[^/]+\/fork$/.test(url.pathname);
    if (forking ? request.method !== 'POST' : request.method !== 'GET' && request.method !== 'HEAD') {
      response.setHeader('Allow', forking ? 'POST' : 'GET, HEAD');
      throw new HttpError(405, 'method_not_allowed', forking ? 'fork with POST' : `${request.method} is not allowed; the dashboard only reads, and forks with POST …/fork`);
    }
    if (forking) {
      // A form of another site cannot send JSON, and a script of another origin cannot without a preflight, which
      // this server never allows: together with the SameSite=Strict cookie, no other page forks in the user's name.
      if (!(request.headers['content-type'] ?? '').toLowerCase().startsWith('application/json')) {
        throw new HttpError(415, 'unsupported_media_type', 'a fork request is JSON: send Content-Type: application/json');
      }
      const origin = request.headers.origin;
      if (origin !== undefined && origin !== 'null' && new URL(origin).host !== request.headers.host) throw new HttpError(403, 'denied', `a fork from ${origin} is not allowed`);
    }
    const auth = authorized(request, url);
    if (!auth.ok) throw new HttpError(401, 'unauthorized', 'a valid dashboard token is required: open the URL with ?token=…');
    const extra: Record<string, string> = {};
    if (options.token !== undefined && auth.fromQuery) {
      // The page's own requests (fetch, EventSource, downloads) then carry the token without it in every URL.
      extra['Set-Cookie'] = `${COOKIE}=${encodeURIComponent(options.token)}; HttpOnly; SameSite=Strict; Path=/`;
    }
    const parts = url.pathname.split('/').filter((part) => part !== '').map((part) => {
      try {
        return decodeURIComponent(part);
      } catch {
        throw new HttpError(400, 'invalid_input', 'malformed path');
      }
    });

    if (parts.length === 0) return serveFile(response, 'index.html', extra);
    if (parts[0] === 'static' && parts.length === 2) return serveFile(response, parts[1]!, extra);
    if (parts[0] !== 'api') throw new HttpError(404, 'not_found', `no page at ${url.pathname}`);
    const [, what, ...rest] = parts;
    if (what === 'fleet' && rest.length === 0) return sendJson(response, 200, options.routes.fleet(), extra);
    if (what === 'workers' && rest.length === 0) return sendJson(response, 200, options.routes.workers(), extra);
    if (what === 'config' && rest.length === 0) return sendJson(response, 200, options.routes.config(), extra);
    if (what === 'events' && rest.length === 0) {
      if (request.method === 'HEAD') {
        response.writeHead(200, { ...SECURITY_HEADERS, ...extra, 'Content-Type': 'text/event-stream; charset=utf-8' });
        response.end();
        return;
      }
      return openEvents(request, response, url, extra);
    }
    if (what === 'machines' && rest.length === 1) {
      const match = /^([a-z]+)\.(svg|json)$/.exec(rest[0]!);
      const machine = match ? options.routes.machine(match[1]!) : undefined;
      if (!match || !machine) throw new HttpError(404, 'not_found', `no machine drawing ${rest[0]}; try turn.svg or session.json`);
      if (match[2] === 'json') return sendJson(response, 200, machine.json, extra);
      response.writeHead(200, { ...SECURITY_HEADERS, 'Content-Type': CONTENT_TYPES['.svg']!, 'Cache-Control': 'no-cache', ...extra });
      response.end(machine.svg);
      return;
    }
    if (what === 'sessions' && rest.length === 0) return sendJson(response, 200, await options.routes.sessions(), extra);
    if (forking) {
      const { tenant, sessionId } = sessionPath(rest);
      const body = await readBody(request, MAX_FORK_BODY);
      return sendJson(response, 200, await options.routes.fork(tenant, sessionId, body), extra);
    }
    if (what === 'sessions' && (rest.length === 2 || rest.length === 3)) {
      const { tenant, sessionId } = sessionPath(rest);
      const format = rest[2];
      if (format !== undefined && format !== 'log.ndjson' && format !== 'log.json') {
        throw new HttpError(404, 'not_found', `no ${format} for a session; try log.ndjson or log.json`);
      }
      const controller = new AbortController();
      response.once('close', () => controller.abort(new Error('the browser went away')));
      const read = await options.routes.session(tenant, sessionId, controller.signal);
      if (!read) throw new HttpError(404, 'not_found', `the bus has no events of ${tenant}/${sessionId}`);
      if (format === undefined) return sendJson(response, 200, options.routes.sessionView(read), extra);
      const download = `${tenant}-${sessionId}.${format === 'log.ndjson' ? 'ndjson' : 'json'}`;
      const headers = { ...SECURITY_HEADERS, 'Cache-Control': 'no-store', 'Content-Disposition': `attachment; filename="${download}"`, ...extra };
      if (format === 'log.json') {
        response.writeHead(200, { ...headers, 'Content-Type': 'application/json; charset=utf-8' });
        response.end(`${JSON.stringify(read.log, null, 2)}\n`);
      } else {
        response.writeHead(200, { ...headers, 'Content-Type': 'application/x-ndjson; charset=utf-8' });
        response.end(read.log.map((event) => `${JSON.stringify(event)}\n`).join(''));
      }
      return;
    }
    throw new HttpError(404, 'not_found', `no API at ${url.pathname}`);
  }

  function serveFile(response: ServerResponse, name: string, extra: Record<string, string>): void {
    const file = files.get(name);
    if (!file) throw new HttpError(404, 'not_found', `no file ${name}`);
    response.writeHead(200, { ...SECURITY_HEADERS, 'Content-Type': file.type, 'Cache-Control': 'no-cache', ...extra });
    response.end(file.body);
  }

  function openEvents(request: IncomingMessage, response: ServerResponse, url: URL, extra: Record<string, string>): void {
    const session = url.searchParams.get('session');
    if (session !== null) sessionPath(session.split('/').length === 2 ? session.split('/') : []);
    response.writeHead(200, {
      ...SECURITY_HEADERS,
      ...extra,
      'Content-Type': 'text/event-stream; charset=utf-8',
      'Cache-Control': 'no-store',
      Connection: 'keep-alive',
      'X-Accel-Buffering': 'no',
    });
    response.flushHeaders();
    const remove = options.hub.add(response, session ?? undefined);
    request.once('close', remove);
  }

  return createServer((request, response) => {
    handle(request, response).catch((error: unknown) => {
      if (error instanceof HttpError) {
        if (!response.headersSent) sendJson(response, error.status, { error: { code: error.code, message: error.message } });
        else response.end();
        return;
      }
      options.logger.warn({ err: error, url: request.url }, 'dashboard request failed');
      if (!response.headersSent) sendJson(response, 502, { error: { code: 'bus_error', message: (error as Error).message } });
      else response.end();
    });
  });
}
