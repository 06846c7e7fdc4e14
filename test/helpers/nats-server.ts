import { mkdtemp, rm } from 'node:fs/promises';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { freePort, startNatsServerProcess } from '../../src/nats-server.ts';
import type { NatsServerProcess } from '../../src/nats-server.ts';

export { freePort };

/** A nats-server started for one test file, on a free loopback port, JetStream on, data in a temp dir. */
export type TestNatsServer = NatsServerProcess;

/** Starts `nats-server` from the PATH; `config` is extra server configuration text. `stop()` removes its data. */
export async function startNatsServer(options: { config?: string } = {}): Promise<TestNatsServer> {
  const storeDir = await mkdtemp(join(tmpdir(), 'agentbus-nats-'));
  const server = await startNatsServerProcess({ storeDir, ...(options.config ? { config: options.config } : {}) });
  return {
    url: server.url,
    port: server.port,
    storeDir: server.storeDir,
    get pid() {
      return server.pid;
    },
    restart: () => server.restart(),
    async stop() {
      await server.stop();
      await rm(storeDir, { recursive: true, force: true });
    },
  };
}
