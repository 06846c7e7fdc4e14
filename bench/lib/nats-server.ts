import { mkdtemp, rm } from 'node:fs/promises';
import { tmpdir } from 'node:os';
import { createServer } from 'node:net';
import { join } from 'node:path';
import { natsServerVersion as versionOf, startNatsServerProcess } from '../../src/nats-server.ts';

/** A nats-server started for one bench run: free loopback port, JetStream on, data in a temp dir. */
export interface BenchNatsServer {
  readonly url: string;
  readonly storeDir: string;
  readonly pid: number | undefined;
  /** The server's monitoring endpoint (`http://127.0.0.1:<port>`), where `/connz` counts each connection's messages. */
  readonly monitorUrl: string;
  stop(): Promise<void>;
}

/** The `nats-server --version` line, e.g. `v2.9.10`. */
export function natsServerVersion(binary = process.env.NATS_SERVER_BIN ?? 'nats-server'): string {
  return versionOf(binary);
}

/** Starts `nats-server` (or `$NATS_SERVER_BIN`) and waits until it is ready. */
export async function startNatsServer(binary = process.env.NATS_SERVER_BIN ?? 'nats-server'): Promise<BenchNatsServer> {
  const storeDir = await mkdtemp(join(tmpdir(), 'agentbus-bench-nats-'));
  const monitorPort = await freePort();
  const server = await startNatsServerProcess({ storeDir, binary, config: `max_payload: 1MB\nhttp: "127.0.0.1:${monitorPort}"` });
  return {
    url: server.url,
    monitorUrl: `http://127.0.0.1:${monitorPort}`,
    storeDir,
    pid: server.pid,
    async stop() {
      await server.stop();
      await rm(storeDir, { recursive: true, force: true });
    },
  };
}

/** A loopback port nobody listens on now. */
function freePort(): Promise<number> {
  return new Promise((resolve, reject) => {
    const probe = createServer();
    probe.once('error', reject);
    probe.listen(0, '127.0.0.1', () => {
      const address = probe.address();
      probe.close(() => (typeof address === 'object' && address ? resolve(address.port) : reject(new Error('no port'))));
    });
  });
}
