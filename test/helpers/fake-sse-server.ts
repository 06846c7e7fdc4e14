import { createServer } from 'node:http';
import type { IncomingMessage, ServerResponse } from 'node:http';
import type { AddressInfo } from 'node:net';

/** One scripted answer of the fake server. */
export type FakeReply =
  /** A `text/event-stream` body of SSE frames (already formatted). `cutAfter` destroys the socket after that many frames. */
  | { readonly kind: 'sse'; readonly frames: readonly string[]; readonly cutAfter?: number; readonly frameDelayMs?: number }
  /** A JSON body with a status, e.g. an API error or a non-streaming completion. */
  | { readonly kind: 'json'; readonly status: number; readonly body: unknown; readonly headers?: Readonly<Record<string, string>> }
  /** Sends the given frames, then holds the response open until the client goes away. */
  | { readonly kind: 'hang'; readonly frames?: readonly string[] };

/** A request the fake server received. */
export interface RecordedRequest {
  readonly method: string;
  readonly path: string;
  readonly headers: IncomingMessage['headers'];
  body: Record<string, unknown>;
  /** True once the client closed the connection before the response was finished. */
  clientClosed: boolean;
  /** Resolves when the response closes, finished or not. */
  readonly closed: Promise<void>;
}

/** A loopback HTTP server that answers each request with the next queued reply. */
export interface FakeSseServer {
  readonly url: string;
  readonly requests: RecordedRequest[];
  enqueue(...replies: FakeReply[]): void;
  /** Forgets recorded requests and queued replies. */
  reset(): void;
  close(): Promise<void>;
}

async function readBody(request: IncomingMessage): Promise<Record<string, unknown>> {
  const parts: Buffer[] = [];
  for await (const part of request) parts.push(part as Buffer);
  const text = Buffer.concat(parts).toString('utf8');
  return text === '' ? {} : (JSON.parse(text) as Record<string, unknown>);
}

const sleep = (ms: number) => new Promise((resolve) => setTimeout(resolve, ms));

async function answer(reply: FakeReply, response: ServerResponse): Promise<void> {
  if (reply.kind === 'json') {
    response.writeHead(reply.status, { 'content-type': 'application/json', ...reply.headers });
    response.end(JSON.stringify(reply.body));
    return;
  }
  response.writeHead(200, { 'content-type': 'text/event-stream', 'cache-control': 'no-cache', connection: 'keep-alive' });
  const frames = reply.frames ?? [];
  // The cut comes after the frames before it have reached the client, as a real dropped connection would.
  const cut = async () => {
    await sleep(30);
    response.socket?.destroy();
  };
  response.flushHeaders();
  for (const [index, frame] of frames.entries()) {
    if (reply.kind === 'sse' && reply.cutAfter === index) return cut();
    await new Promise<void>((resolve) => response.write(frame, () => resolve()));
    if (reply.kind === 'sse' && reply.frameDelayMs) await sleep(reply.frameDelayMs);
  }
  if (reply.kind === 'hang') return;
  if (reply.cutAfter !== undefined && reply.cutAfter >= frames.length) return cut();
  response.end();
}

/**
 * Starts the fake server on 127.0.0.1 and a free port. `check` looks at each request's body first, as the real API
 * does: a reply it returns (a 400) is sent instead of the next queued one, which stays queued.
 */
export async function startFakeSseServer(options: { check?: (body: Record<string, unknown>) => FakeReply | undefined } = {}): Promise<FakeSseServer> {
  const queue: FakeReply[] = [];
  const requests: RecordedRequest[] = [];
  const server = createServer((request, response) => {
    let resolveClosed: () => void = () => {};
    const recorded: RecordedRequest = {
      method: request.method ?? '',
      path: request.url ?? '',
      headers: request.headers,
      body: {},
      clientClosed: false,
      closed: new Promise((resolve) => (resolveClosed = resolve)),
    };
    response.on('close', () => {
      if (!response.writableFinished) recorded.clientClosed = true;
      resolveClosed();
    });
    readBody(request)
      .then((body) => {
        recorded.body = body;
        requests.push(recorded);
        const refused = options.check?.(body);
        if (refused) return answer(refused, response);
        const reply = queue.shift() ?? { kind: 'json', status: 500, body: { error: { message: 'no reply queued', type: 'server_error' } } };
        return answer(reply, response);
      })
      .catch(() => response.destroy());
  });
  await new Promise<void>((resolve) => server.listen(0, '127.0.0.1', resolve));
  const { port } = server.address() as AddressInfo;
  return {
    url: `http://127.0.0.1:${port}`,
    requests,
    enqueue: (...replies) => queue.push(...replies),
    reset: () => {
      queue.length = 0;
      requests.length = 0;
    },
    close: () =>
      new Promise<void>((resolve) => {
        server.closeAllConnections();
        server.close(() => resolve());
      }),
  };
}
