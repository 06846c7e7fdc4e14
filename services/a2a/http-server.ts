import type { Server } from 'node:http';
import type { AddressInfo } from 'node:net';
import { AGENT_CARD_PATH, AgentCard } from '@a2a-js/sdk';
import { legacyAgentCardRouter } from '@a2a-js/sdk/compat/v0_3/server/express';
import type { A2ARequestHandler } from '@a2a-js/sdk/server';
import { UnauthenticatedUser } from '@a2a-js/sdk/server';
import { agentCardHandler, jsonRpcHandler } from '@a2a-js/sdk/server/express';
import express from 'express';
import type { NextFunction, Request, Response } from 'express';
import type { Logger } from '../../src/logging.ts';
import { isLoopbackAddress, isLoopbackHost, sameSecret } from '../../src/service/http-basics.ts';
import { JSONRPC_PATH } from './agent-card.ts';

/** Options of {@link startA2aHttpServer}. */
export interface A2aHttpOptions {
  readonly handler: A2ARequestHandler;
  readonly host: string;
  readonly port: number;
  /** When set, JSON-RPC calls must carry `Authorization: Bearer <token>` (the card stays public). */
  readonly token?: string;
  readonly logger: Logger;
}

/** The running HTTP server. */
export interface A2aHttpServer {
  /** `http://host:port`, the port the server got (port 0 picks one). */
  readonly url: string;
  /** Stops listening and closes every connection, streams included. */
  close(): Promise<void>;
}

/** A JSON-RPC error answer outside the SDK's transport (authentication, a foreign Host). */
function refuse(response: Response, status: number, message: string, headers: Record<string, string> = {}): void {
  response.status(status).set(headers).json({ jsonrpc: '2.0', id: null, error: { code: -32600, message } });
}

/**
 * Serves A2A over HTTP with the SDK's Express transports: the agent card at `/.well-known/agent-card.json` (v1.0, and
 * v0.3 to a client that asks for it or names no version), JSON-RPC 2.0 with SSE streaming at `/a2a/jsonrpc` (the v1.0
 * methods, and the v0.3 ones for a request without `A2A-Version: 1.0`). With a token, calls without the bearer get a
 * 401. Bound to loopback, a request whose Host is not a loopback name is refused (a web page cannot reach it by DNS
 * rebinding). Resolves once listening.
 */
export async function startA2aHttpServer(options: A2aHttpOptions): Promise<A2aHttpServer> {
  const { handler, logger } = options;
  const app = express();
  app.disable('x-powered-by');
  const loopbackOnly = isLoopbackAddress(options.host);
  app.use((request: Request, response: Response, next: NextFunction) => {
    if (loopbackOnly && !isLoopbackHost(request.headers.host)) return refuse(response, 403, 'this server answers loopback Host names only');
    next();
  });
  // The v0.3 card to a client that asks for 0.3 or names no version (the SDK converts it); the v1.0 card in its
  // ProtoJSON form (`securitySchemes.bearer.httpAuthSecurityScheme`), which the SDK's own card handler does not
  // produce from the typed card, and the SDK's client reads.
  app.use(`/${AGENT_CARD_PATH}`, legacyAgentCardRouter({ agentCardProvider: handler }));
  app.use(`/${AGENT_CARD_PATH}`, agentCardHandler({ agentCardProvider: async () => AgentCard.toJSON(await handler.getAgentCard()) as AgentCard }));
  const token = options.token;
  if (token !== undefined) {
    app.use(JSONRPC_PATH, (request: Request, response: Response, next: NextFunction) => {
      const given = /^Bearer\s+(.+)$/i.exec(request.headers.authorization ?? '')?.[1]?.trim();
      if (given !== undefined && sameSecret(given, token)) return next();
      refuse(response, 401, 'this agent requires Authorization: Bearer <token> (the card names the scheme)', { 'WWW-Authenticate': 'Bearer' });
    });
  }
  const authenticated = { isAuthenticated: true, userName: 'bearer' };
  app.use(
    JSONRPC_PATH,
    jsonRpcHandler({
      requestHandler: handler,
      userBuilder: async () => (token === undefined ? new UnauthenticatedUser() : authenticated),
      legacyCompat: { enabled: true },
    }),
  );

  const server: Server = await new Promise((resolve, reject) => {
    const listening = app.listen(options.port, options.host, (error?: Error) => (error ? reject(error) : resolve(listening)));
    listening.once('error', reject);
  });
  const address = server.address() as AddressInfo;
  const shownHost = address.family === 'IPv6' ? `[${address.address}]` : address.address;
  const url = `http://${shownHost}:${address.port}`;
  logger.info({ url }, 'A2A server listening');
  if (!loopbackOnly && token === undefined) logger.warn({ url }, 'the A2A server listens beyond loopback without AGENTBUS_A2A_TOKEN: whoever reaches it runs the agent and its tools');
  return {
    url,
    close: () =>
      new Promise<void>((resolve) => {
        server.close(() => resolve());
        server.closeAllConnections();
      }),
  };
}
