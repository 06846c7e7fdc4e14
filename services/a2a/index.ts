import { nuid } from '@nats-io/nats-core';
import type { NatsConnection } from '@nats-io/nats-core';
import { createAgentbusClient, EventReader } from '../../src/client/index.ts';
import type { Logger } from '../../src/logging.ts';
import { createCodec } from '../../src/protocol/index.ts';
import { buildAgentCard } from './agent-card.ts';
import type { A2aConfig } from './config.ts';
import { startA2aHttpServer } from './http-server.ts';
import { createRequestHandler } from './request-handler.ts';
import { createTaskReader } from './task-reader.ts';

export { DEFAULT_A2A_PORT, readA2aConfig } from './config.ts';
export type { A2aConfig } from './config.ts';
export { JSONRPC_PATH, buildAgentCard } from './agent-card.ts';
export { parseTaskId, taskIdOf } from './turn-task.ts';

/** Options of {@link startA2aService}. */
export interface A2aServiceOptions {
  readonly nc: NatsConnection;
  readonly logger: Logger;
  readonly config: A2aConfig;
  /** The subject prefix of the bus (`AGENTBUS_PREFIX`). */
  readonly prefix?: string;
  /** The version the card announces; default 0.1.0. */
  readonly version?: string;
}

/** The running A2A server. */
export interface A2aService {
  /** Where it listens: `http://host:port`. */
  readonly url: string;
  /** Stops listening, ends open requests and streams (their turns go on in the runtime). */
  stop(): Promise<void>;
}

/**
 * Serves agentbus agents over A2A (HTTP JSON-RPC, SSE): one tenant, configured (`AGENTBUS_A2A_TENANT`), each context
 * one of its sessions and each task one turn. It reaches the runtime only through the client SDK, as a tenant's app
 * does: prompts and cancels on the session subjects, events by subscription (no JetStream), the log read back through
 * memory's `history` and `sessions.list`. Its NATS user needs nothing more (deploy/nats/nats-server.conf, `a2a`).
 *
 * @example
 * const service = await startA2aService({ nc, logger, config: readA2aConfig(process.env) });
 */
export async function startA2aService(options: A2aServiceOptions): Promise<A2aService> {
  const { nc, logger, config } = options;
  const codec = createCodec({ maxPayload: nc.info?.max_payload });
  const client = createAgentbusClient({ nc, codec, eventReader: EventReader.core, ...(options.prefix ? { prefix: options.prefix } : {}) });
  const stopping = new AbortController();
  const reader = createTaskReader({ client, tenant: config.tenant });
  let card = buildAgentCard(config, config.publicUrl ?? `http://${config.host}:${config.port}`, options.version ?? '0.1.0');
  const handler = createRequestHandler({
    client,
    reader,
    config,
    logger,
    stopping: stopping.signal,
    newSessionId: () => `a2a-${nuid.next()}`,
    get card() {
      return card;
    },
  });
  const http = await startA2aHttpServer({ handler, host: config.host, port: config.port, logger, ...(config.token ? { token: config.token } : {}) });
  // Port 0 picked a port: the card names the one the server got.
  if (!config.publicUrl) card = buildAgentCard(config, http.url, options.version ?? '0.1.0');
  logger.info({ url: http.url, tenant: config.tenant, authenticated: config.token !== undefined }, 'A2A server serving');
  return {
    url: http.url,
    async stop() {
      stopping.abort(new Error('the A2A server is stopping'));
      await http.close();
    },
  };
}
