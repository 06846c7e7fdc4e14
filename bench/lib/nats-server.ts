import { execFileSync, spawn } from 'node:child_process';
import { mkdtemp, rm, writeFile } from 'node:fs/promises';
import { createServer } from 'node:net';
import { tmpdir } from 'node:os';
import { join } from 'node:path';

/** A nats-server started for one bench run: free loopback port, JetStream on, data in a temp dir. */
export interface BenchNatsServer {
  readonly url: string;
  readonly storeDir: string;
  stop(): Promise<void>;
}

/** The `nats-server --version` line, e.g. `v2.9.10`. */
export function natsServerVersion(binary = process.env.NATS_SERVER_BIN ?? 'nats-server'): string {
  return execFileSync(binary, ['--version'], { encoding: 'utf8' }).trim().replace(/^nats-server:\s*/, '');
}

async function freePort(): Promise<number> {
  return new Promise((resolve, reject) => {
    const server = createServer();
    server.unref();
    server.on('error', reject);
    server.listen(0, '127.0.0.1', () => {
      const address = server.address();
      server.close(() => (typeof address === 'object' && address ? resolve(address.port) : reject(new Error('no free port'))));
    });
  });
}

/** Starts `nats-server` (or `$NATS_SERVER_BIN`) and waits until it is ready. */
export async function startNatsServer(binary = process.env.NATS_SERVER_BIN ?? 'nats-server'): Promise<BenchNatsServer> {
  const storeDir = await mkdtemp(join(tmpdir(), 'agentbus-bench-nats-'));
  const port = await freePort();
  const configFile = join(storeDir, 'server.conf');
  await writeFile(configFile, `listen: "127.0.0.1:${port}"\nmax_payload: 1MB\njetstream { store_dir: ${JSON.stringify(storeDir)} }\n`);
  const child = spawn(binary, ['-c', configFile], { stdio: ['ignore', 'ignore', 'pipe'] });
  let output = '';
  await new Promise<void>((resolve, reject) => {
    const deadline = setTimeout(() => reject(new Error(`nats-server did not start:\n${output}`)), 10_000);
    child.stderr.on('data', (chunk: Buffer) => {
      output += chunk.toString();
      if (output.includes('Server is ready')) {
        clearTimeout(deadline);
        resolve();
      }
    });
    child.once('exit', (code) => {
      clearTimeout(deadline);
      reject(new Error(`nats-server exited with ${code}:\n${output}`));
    });
  });
  child.stderr.removeAllListeners('data');
  child.stderr.resume();
  return {
    url: `nats://127.0.0.1:${port}`,
    storeDir,
    async stop() {
      if (child.exitCode === null && child.signalCode === null) {
        const exited = new Promise((resolve) => child.once('exit', resolve));
        child.kill('SIGTERM');
        await exited;
      }
      await rm(storeDir, { recursive: true, force: true });
    },
  };
}
