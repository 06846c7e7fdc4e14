import type { AddressInfo } from 'node:net';
import type { NatsConnection } from '@nats-io/nats-core';
import { createAgentbusClient } from '../../src/client/index.ts';
import type { Logger } from '../../src/logging.ts';
import type { ChatConfig } from './config.ts';
import { createChatHttpServer } from './http-server.ts';

export { DEFAULT_CHAT_PORT, readChatConfig } from './config.ts';
export type { ChatConfig } from './config.ts';

/** Options of {@link startChatService}. */
export interface ChatServiceOptions {
  readonly nc: NatsConnection;
  readonly logger: Logger;
  readonly config: ChatConfig;
  /** The subject prefix of the bus (`AGENTBUS_PREFIX`). */
  readonly prefix?: string;
  readonly keepaliveMs?: number;
}

/** The running chat gateway. */
export interface ChatService {
  /** Where it listens: `http://host:port`. */
  readonly url: string;
  stop(): Promise<void>;
}

/**
 * Starts the chat gateway: an HTTP server for `useChat` front ends (the AI SDK UI message stream over SSE) that
 * prompts, follows, resumes and cancels one tenant's sessions through the client SDK, as any client app does.
 * Nothing of a stream is kept here: a resumed stream is read back from the session's log and live streams.
 */
export async function startChatService(options: ChatServiceOptions): Promise<ChatService> {
  const { nc, logger, config } = options;
  const client = createAgentbusClient({ nc, ...(options.prefix ? { prefix: options.prefix } : {}) });
  const stopping = new AbortController();
  const server = createChatHttpServer({ client, config, logger, signal: stopping.signal, ...(options.keepaliveMs ? { keepaliveMs: options.keepaliveMs } : {}) });
  await new Promise<void>((resolve, reject) => {
    server.once('error', reject);
    server.listen(config.port, config.host, () => {
      server.off('error', reject);
      resolve();
    });
  });
  const { port } = server.address() as AddressInfo;
  const url = `http://${config.host.includes(':') ? `[${config.host}]` : config.host}:${port}`;
  return {
    url,
    async stop() {
      // Open streams end (their turns run on, and can be resumed elsewhere); then the server closes.
      stopping.abort();
      server.closeIdleConnections();
      await new Promise<void>((resolve) => server.close(() => resolve()));
    },
  };
}
