import { afterAll, beforeAll } from 'vitest';
import type { NatsConnection } from '@nats-io/nats-core';
import { connect } from '@nats-io/transport-node';
import { startNatsServer } from './nats-server.ts';
import type { TestNatsServer } from './nats-server.ts';

/** The server and connection of {@link useNatsServer}; read them inside tests or later hooks. */
export interface NatsFixture {
  readonly server: TestNatsServer;
  readonly nc: NatsConnection;
}

/**
 * Starts a nats-server for the calling test file and connects to it in `beforeAll`; closes the
 * connection and stops the server in `afterAll`. Call it at the top level of the file.
 *
 * @example
 * const nats = useNatsServer();
 * it('answers', async () => { await nats.nc.request('x', new Uint8Array()); });
 */
export function useNatsServer(options: { config?: string } = {}): NatsFixture {
  let server: TestNatsServer | undefined;
  let nc: NatsConnection | undefined;
  beforeAll(async () => {
    server = await startNatsServer(options);
    nc = await connect({ servers: server.url });
  });
  afterAll(async () => {
    await nc?.close();
    await server?.stop();
  });
  return {
    get server() {
      if (!server) throw new Error('useNatsServer: the server starts in beforeAll');
      return server;
    },
    get nc() {
      if (!nc) throw new Error('useNatsServer: the connection opens in beforeAll');
      return nc;
    },
  };
}
