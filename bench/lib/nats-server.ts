import { mkdtemp, rm } from 'node:fs/promises';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { natsServerVersion as versionOf, startNatsServerProcess } from '../../src/nats-server.ts';

/** A nats-server started for one bench run: free loopback port, JetStream on, data in a temp dir. */
export interface BenchNatsServer {
  readonly url: string;
  readonly storeDir: string;
  readonly pid: number | undefined;
  stop(): Promise<void>;
}

/** The `nats-server --version` line, e.g. `v2.9.10`. */
export function natsServerVersion(binary = process.env.NATS_SERVER_BIN ?? 'nats-server'): string {
  return versionOf(binary);
}

/** Starts `nats-server` (or `$NATS_SERVER_BIN`) and waits until it is ready. */
export async function startNatsServer(binary = process.env.NATS_SERVER_BIN ?? 'nats-server'): Promise<BenchNatsServer> {
  const storeDir = await mkdtemp(join(tmpdir(), 'agentbus-bench-nats-'));
  const server = await startNatsServerProcess({ storeDir, binary, config: 'max_payload: 1MB' });
  return {
    url: server.url,
    storeDir,
    pid: server.pid,
    async stop() {
      await server.stop();
      await rm(storeDir, { recursive: true, force: true });
    },
  };
}
