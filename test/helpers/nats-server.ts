import { spawn } from 'node:child_process';
import type { ChildProcess } from 'node:child_process';
import { mkdtemp, rm, writeFile } from 'node:fs/promises';
import { createServer } from 'node:net';
import { tmpdir } from 'node:os';
import { join } from 'node:path';

/** A nats-server started for one test file, on a free loopback port, JetStream on, data in a temp dir. */
export interface TestNatsServer {
  readonly url: string;
  readonly port: number;
  readonly storeDir: string;
  /** Stops the server and starts it again on the same port and store: clients see a disconnect. */
  restart(): Promise<void>;
  stop(): Promise<void>;
}

/** Finds a free TCP port on 127.0.0.1. */
export async function freePort(): Promise<number> {
  return new Promise((resolve, reject) => {
    const server = createServer();
    server.unref();
    server.on('error', reject);
    server.listen(0, '127.0.0.1', () => {
      const address = server.address();
      server.close(() => (typeof address === 'object' && address ? resolve(address.port) : reject(new Error('no port'))));
    });
  });
}

/** Starts `nats-server` from the PATH; `config` is extra server configuration text. */
export async function startNatsServer(options: { config?: string } = {}): Promise<TestNatsServer> {
  const storeDir = await mkdtemp(join(tmpdir(), 'agentbus-nats-'));
  const port = await freePort();
  const configFile = join(storeDir, 'server.conf');
  await writeFile(
    configFile,
    `listen: "127.0.0.1:${port}"\njetstream { store_dir: ${JSON.stringify(storeDir)} }\n${options.config ?? ''}\n`,
  );
  let child = await launch(configFile);
  return {
    url: `nats://127.0.0.1:${port}`,
    port,
    storeDir,
    async restart() {
      await halt(child);
      child = await launch(configFile);
    },
    async stop() {
      await halt(child);
      await rm(storeDir, { recursive: true, force: true });
    },
  };
}

async function launch(configFile: string): Promise<ChildProcess> {
  const child: ChildProcess = spawn('nats-server', ['-c', configFile], { stdio: ['ignore', 'ignore', 'pipe'] });
  let output = '';
  child.stderr?.on('data', (chunk: Buffer) => {
    output += chunk.toString();
  });
  await new Promise<void>((resolve, reject) => {
    const deadline = setTimeout(() => reject(new Error(`nats-server did not start:\n${output}`)), 10_000);
    const onExit = (code: number | null) => {
      clearTimeout(deadline);
      reject(new Error(`nats-server exited with ${code}:\n${output}`));
    };
    child.stderr?.on('data', () => {
      if (!output.includes('Server is ready')) return;
      clearTimeout(deadline);
      child.off('exit', onExit);
      resolve();
    });
    child.on('exit', onExit);
  });
  return child;
}

async function halt(child: ChildProcess): Promise<void> {
  if (child.exitCode !== null || child.signalCode !== null) return;
  const exited = new Promise((resolve) => child.once('exit', resolve));
  child.kill('SIGTERM');
  await exited;
}
