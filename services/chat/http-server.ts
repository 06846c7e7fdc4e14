import { createServer } from 'node:http';
import type { IncomingMessage, Server, ServerResponse } from 'node:http';
import type { AgentbusClient, SessionTarget, WatchFrom } from '../../src/client/index.ts';
import { AgentbusError, ErrorCode, InvalidInputError } from '../../src/errors.ts';
import type { Logger } from '../../src/logging.ts';
import { inputAnswerSchema, isToken } from '../../src/protocol/index.ts';
import type { CommandReply } from '../../src/protocol/index.ts';
import { HttpError, isLoopbackAddress, isLoopbackHost, sameSecret, sendJson } from '../../src/service/http-basics.ts';
import { readChatRequest } from './chat-request.ts';
import type { ChatConfig } from './config.ts';
import { findLastTurn, openSessionWatch, parseEventId, streamTurn } from './turn-stream.ts';
import type { StreamPosition } from './turn-stream.ts';
import type { UiChunk } from './ui-message-encoder.ts';

/** Collaborators of the chat gateway's HTTP server. */
export interface ChatHttpOptions {
  readonly client: AgentbusClient;
  readonly config: ChatConfig;
  readonly logger: Logger;
  /** Ends every open stream (the service is stopping). */
  readonly signal: AbortSignal;
  /** A comment line on open streams this often, so proxies keep them; default 15 s. */
  readonly keepaliveMs?: number;
}

/** The largest request body read. */
const MAX_BODY_BYTES = 1024 * 1024;

/** HTTP statuses of agentbus refusals. */
const STATUS_OF_CODE: Readonly<Record<string, number>> = {
  [ErrorCode.invalidInput]: 400,
  [ErrorCode.payloadTooLarge]: 413,
  [ErrorCode.denied]: 403,
  [ErrorCode.notFound]: 404,
  [ErrorCode.sessionDeleted]: 410,
  [ErrorCode.busy]: 409,
  [ErrorCode.conflict]: 409,
  [ErrorCode.rateLimited]: 429,
  [ErrorCode.budgetExceeded]: 429,
  [ErrorCode.noResponders]: 503,
  [ErrorCode.timeout]: 504,
};

/** The headers of a UI message stream (what `createUIMessageStreamResponse` of the AI SDK sends). */
const STREAM_HEADERS = {
  'Content-Type': 'text/event-stream; charset=utf-8',
  'Cache-Control': 'no-cache, no-transform',
  Connection: 'keep-alive',
  'X-Accel-Buffering': 'no',
  'x-vercel-ai-ui-message-stream': 'v1',
};

/** Throws a refused approval or answer (`what`) as an {@link AgentbusError}. */
function throwUnlessOk(reply: CommandReply, what: string): void {
  if (!reply.ok) throw new AgentbusError(reply.error?.code ?? ErrorCode.conflict, reply.error?.message ?? `${what} was refused`);
}

async function readBody(request: IncomingMessage): Promise<unknown> {
  const chunks: Buffer[] = [];
  let size = 0;
  for await (const chunk of request as AsyncIterable<Buffer>) {
    size += chunk.length;
    if (size > MAX_BODY_BYTES) throw new HttpError(413, ErrorCode.payloadTooLarge, `the request body is over ${MAX_BODY_BYTES} bytes`);
    chunks.push(chunk);
  }
  try {
    return JSON.parse(Buffer.concat(chunks).toString('utf8')) as unknown;
  } catch {
    throw new HttpError(400, ErrorCode.invalidInput, 'the request body is not JSON');
  }
}

/**
 * The chat gateway's HTTP server (not yet listening): the endpoints a `useChat` front end (ai 6,
 * `DefaultChatTransport` with `api: <base>/api/chat`, `resume: true`) talks to, for one tenant's sessions:
 * - `POST /api/chat` `{ id, messages, trigger }`: the last user message is prompted into session `id` and its turn
 *   streamed back as a UI message stream (SSE, each event's id `<log seq>-<live seq>`); an assistant message with
 *   approval responses sends them as `approve` decisions, the body's `answers` as `input`, and streams the turn on;
 *   `outputSchema` in the body types the prompt's turn.
 * - `GET /api/chat/<id>/stream`: the session's running turn from its start (204 when none runs); with a
 *   `Last-Event-ID` header, from just after that event, to the turn's end even if it ended meanwhile.
 * - `POST /api/chat/<id>/input` `{ toolCallId, requestId?, answer }`: answers a tool's question (JSON reply).
 * - `POST /api/chat/<id>/cancel`: cancels the running turn. Closing a stream never cancels it: the turn runs on,
 *   and the stream can be resumed.
 * Every request needs `Authorization: Bearer <token>` (or `?token=`); CORS only for the configured origins.
 */
export function createChatHttpServer(options: ChatHttpOptions): Server {
  const { client, config, logger } = options;
  const loopbackOnly = isLoopbackAddress(config.host);
  const keepaliveMs = options.keepaliveMs ?? 15_000;
  const targetOf = (sessionId: string): SessionTarget => {
    if (!isToken(sessionId)) throw new HttpError(400, ErrorCode.invalidInput, 'the chat id must match [A-Za-z0-9_-]{1,64}');
    return { tenant: config.tenant, sessionId };
  };

  const corsHeaders = (request: IncomingMessage): Record<string, string> => {
    const origin = request.headers.origin;
    if (!origin || !config.origins.includes(origin)) return {};
    return {
      'Access-Control-Allow-Origin': origin,
      Vary: 'Origin',
      'Access-Control-Allow-Methods': 'GET, POST, OPTIONS',
      'Access-Control-Allow-Headers': 'authorization, content-type, last-event-id',
      'Access-Control-Max-Age': '600',
    };
  };

  const authorized = (request: IncomingMessage, url: URL): boolean => {
    const header = request.headers.authorization;
    if (header?.startsWith('Bearer ')) return sameSecret(header.slice('Bearer '.length), config.token);
    const query = url.searchParams.get('token');
    return query !== null && sameSecret(query, config.token);
  };

  /** Streams one turn as SSE from `from` (or from what comes next) to its end, or until the client goes away. */
  async function stream(response: ServerResponse, target: SessionTarget, headers: Record<string, string>, begin: {
    from?: WatchFrom;
    /** The `Last-Event-ID` of a resumed stream: what the client has already. */
    sentThrough?: StreamPosition;
    /** What makes the turn run or go on, once the watch is open; resolves with the turn's id. */
    start: () => Promise<string>;
    /** Tool calls the client shows already (the approvals and answers it sends), whose parts the stream updates. */
    toolCallsShown?: readonly string[];
  }): Promise<void> {
    const gone = new AbortController();
    const signal = AbortSignal.any([gone.signal, options.signal]);
    const onClose = () => gone.abort(new AgentbusError(ErrorCode.cancelled, 'the client closed the stream'));
    response.once('close', onClose);
    const watch = await openSessionWatch(client, target, signal, begin.from);
    let keepalive: ReturnType<typeof setInterval> | undefined;
    try {
      // Refusals (busy, not found, …) are answered as JSON before any byte of the stream.
      const turnId = await begin.start();
      response.writeHead(200, { ...headers, ...STREAM_HEADERS });
      response.flushHeaders();
      keepalive = setInterval(() => response.write(': keep-alive\n\n'), keepaliveMs);
      const write = (chunk: UiChunk, id: string) =>
        new Promise<void>((resolve) => {
          if (response.write(`id: ${id}\ndata: ${JSON.stringify(chunk)}\n\n`)) resolve();
          else response.once('drain', resolve);
        });
      const finished = await streamTurn(watch, turnId, write, begin.sentThrough, begin.toolCallsShown).catch((error: unknown) => {
        if (signal.aborted) return false;
        throw error;
      });
      if (finished) response.end('data: [DONE]\n\n');
      else response.end();
    } finally {
      clearInterval(keepalive);
      response.off('close', onClose);
      await watch.close().catch(() => undefined);
    }
  }

  async function handle(request: IncomingMessage, response: ServerResponse): Promise<void> {
    if (loopbackOnly && !isLoopbackHost(request.headers.host)) {
      throw new HttpError(403, ErrorCode.denied, 'this gateway answers only requests addressed to a loopback host (127.0.0.1, localhost)');
    }
    const cors = corsHeaders(request);
    if (request.method === 'OPTIONS') {
      response.writeHead(204, cors);
      response.end();
      return;
    }
    let url: URL;
    try {
      url = new URL(request.url ?? '/', 'http://chat.invalid');
    } catch {
      throw new HttpError(400, ErrorCode.invalidInput, 'malformed request URL');
    }
    if (!authorized(request, url)) throw Object.assign(new HttpError(401, 'unauthorized', 'a valid token is required: Authorization: Bearer <AGENTBUS_CHAT_TOKEN>'), { headers: cors });
    const parts = url.pathname.split('/').filter((part) => part !== '');
    if (parts[0] !== 'api' || parts[1] !== 'chat') throw new HttpError(404, ErrorCode.notFound, `no API at ${url.pathname}`);
    const method = request.method ?? 'GET';

    if (parts.length === 2 && method === 'POST') {
      let action;
      try {
        action = readChatRequest(await readBody(request));
      } catch (error) {
        if (error instanceof InvalidInputError) throw new HttpError(400, ErrorCode.invalidInput, error.message);
        throw error;
      }
      const target = targetOf(action.sessionId);
      if (action.kind === 'prompt') {
        return stream(response, target, cors, {
          start: async () => (await client.prompt(target, { text: action.text, ...(action.outputSchema ? { outputSchema: action.outputSchema } : {}) }, { timeoutMs: 15_000 })).turnId,
        });
      }
      const turn = await findLastTurn(client, target, options.signal);
      if (!turn || turn.ended) throw new HttpError(409, ErrorCode.conflict, 'no turn of this chat awaits an approval or an answer');
      return stream(response, target, cors, {
        toolCallsShown: [...action.decisions, ...action.answers].map((each) => each.toolCallId),
        start: async () => {
          for (const decision of action.decisions) throwUnlessOk(await client.approve(target, decision, { timeoutMs: 10_000 }), `the approval of ${decision.toolCallId}`);
          for (const answer of action.answers) throwUnlessOk(await client.input(target, answer, { timeoutMs: 10_000 }), `the answer for ${answer.toolCallId}`);
          return turn.turnId;
        },
      });
    }
    if (parts.length === 4 && parts[3] === 'input' && method === 'POST') {
      const target = targetOf(parts[2]!);
      const parsed = inputAnswerSchema.safeParse(await readBody(request));
      if (!parsed.success) {
        const issue = parsed.error.issues[0]!;
        throw new HttpError(400, ErrorCode.invalidInput, `input: ${issue.path.join('.') || '(body)'}: ${issue.message}`);
      }
      const reply = await client.input(target, parsed.data, { timeoutMs: 10_000 });
      sendJson(response, reply.ok ? 200 : (STATUS_OF_CODE[reply.error?.code ?? ''] ?? 502), reply, cors);
      return;
    }
    if (parts.length === 4 && parts[3] === 'stream' && method === 'GET') {
      const target = targetOf(parts[2]!);
      const after = parseEventId(request.headers['last-event-id'] as string | undefined);
      const turn = await findLastTurn(client, target, options.signal).catch((error: unknown) => {
        if (error instanceof AgentbusError && error.code === ErrorCode.notFound) return undefined;
        throw error;
      });
      if (!turn || (turn.ended && !after)) {
        response.writeHead(204, cors);
        response.end();
        return;
      }
      // The whole turn, from its start in the log and all the live events still kept (its own deltas are picked out
      // by turn id; deltas past the live stream's 5 minutes come back as each step's text); after a Last-Event-ID,
      // only what follows it goes out.
      const from = { log: Math.max(0, turn.startedSeq - 1), live: 0 };
      return stream(response, target, cors, { from, ...(after ? { sentThrough: after } : {}), start: () => Promise.resolve(turn.turnId) });
    }
    if (parts.length === 4 && parts[3] === 'cancel' && method === 'POST') {
      const reply = await client.cancel(targetOf(parts[2]!), 'cancelled from the chat', { timeoutMs: 10_000 });
      sendJson(response, reply.ok ? 200 : (STATUS_OF_CODE[reply.error?.code ?? ""] ?? 502), reply, cors);
      return;
    }
    response.setHeader('Allow', parts.length === 2 ? 'POST' : parts[3] === 'stream' ? 'GET' : 'POST');
    throw new HttpError(parts.length === 2 || parts.length === 4 ? 405 : 404, parts.length === 2 || parts.length === 4 ? 'method_not_allowed' : ErrorCode.notFound, `${method} ${url.pathname} is not served`);
  }

  return createServer((request, response) => {
    handle(request, response).catch((error: unknown) => {
      const headers = (error as { headers?: Record<string, string> }).headers ?? corsHeaders(request);
      const refusal =
        error instanceof HttpError
          ? { status: error.status, code: error.code, message: error.message }
          : error instanceof AgentbusError
            ? { status: STATUS_OF_CODE[error.code] ?? 502, code: error.code, message: error.message }
            : undefined;
      if (!refusal) logger.warn({ err: error, url: request.url }, 'chat request failed');
      if (response.headersSent) {
        response.end();
        return;
      }
      const { status, code, message } = refusal ?? { status: 502, code: 'bus_error', message: (error as Error).message };
      sendJson(response, status, { error: { code, message } }, headers);
    });
  });
}
