import { randomUUID } from 'node:crypto';
import { createServer } from 'node:http';
import type { Server } from 'node:http';
import type { AddressInfo } from 'node:net';
import { StreamableHTTPServerTransport } from '@modelcontextprotocol/sdk/server/streamableHttp.js';
import { createTestMcpServer } from './mcp-test-tools.ts';
import type { McpTestRecord } from './mcp-test-tools.ts';

/** The test MCP server over streamable HTTP on a loopback port, one `McpServer` per session. */
export interface McpHttpServer {
  readonly url: string;
  readonly records: McpTestRecord[];
  /** Sessions opened so far. */
  readonly sessions: number;
  /** Stops listening and drops every connection and session (the port stays free for `listen` again). */
  close(): Promise<void>;
  /** Listens again on the same port, with no sessions: a server that restarted. */
  listen(): Promise<void>;
}

/** Starts the HTTP test server on `127.0.0.1` at a free port (`/mcp`). */
export async function startMcpHttpServer(): Promise<McpHttpServer> {
  const records: McpTestRecord[] = [];
  const transports = new Map<string, StreamableHTTPServerTransport>();
  let sessions = 0;
  let port = 0;
  let server: Server | undefined;

  async function listen(): Promise<void> {
    const http = createServer((request, response) => {
      void (async () => {
        const id = request.headers['mcp-session-id'];
        let transport = typeof id === 'string' ? transports.get(id) : undefined;
        if (!transport) {
          if (typeof id === 'string') {
            response.writeHead(404, { 'Content-Type': 'application/json' }).end(JSON.stringify({ jsonrpc: '2.0', error: { code: -32001, message: 'Session not found' }, id: null }));
            return;
          }
          const created = new StreamableHTTPServerTransport({
            sessionIdGenerator: () => randomUUID(),
            onsessioninitialized: (sessionId) => {
              sessions += 1;
              transports.set(sessionId, created);
            },
          });
          created.onclose = () => {
            if (created.sessionId) transports.delete(created.sessionId);
          };
          await createTestMcpServer((entry) => records.push(entry)).connect(created);
          transport = created;
        }
        await transport.handleRequest(request, response);
      })().catch((error: unknown) => {
        if (!response.headersSent) response.writeHead(500).end(String(error));
      });
    });
    await new Promise<void>((resolve) => http.listen(port, '127.0.0.1', resolve));
    port = (http.address() as AddressInfo).port;
    server = http;
  }

  await listen();
  return {
    get url() {
      return `http://127.0.0.1:${port}/mcp`;
    },
    records,
    get sessions() {
      return sessions;
    },
    async close() {
      const http = server;
      server = undefined;
      for (const transport of transports.values()) await transport.close().catch(() => undefined);
      transports.clear();
      if (!http) return;
      http.closeAllConnections();
      await new Promise<void>((resolve) => http.close(() => resolve()));
    },
    listen,
  };
}
