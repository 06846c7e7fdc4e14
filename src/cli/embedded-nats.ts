import { spawn, spawnSync } from 'node:child_process';
import type { ChildProcess } from 'node:child_process';
import { mkdir } from 'node:fs/promises';
import { createServer } from 'node:net';
import { join } from 'node:path';

/** A nats-server started by the CLI, with JetStream in the project's `.agentbus/` folder. */
export interface EmbeddedNats {
  readonly url: string;
  readonly pid: number;
  stop(): Promise<void>;
}

/** What to tell someone whose machine has no `nats-server`. */
export const INSTALL_HINT = [
  'agentbus needs nats-server (2.9 or later) on the PATH to run its embedded bus. Install it with one of:',
  '  Debian/Ubuntu:  sudo apt-get install nats-server',
  '  macOS:          brew install nats-server',
  '  Docker:         docker run -p 4222:4222 nats:2.10 -js   (then pass --nats nats://127.0.0.1:4222)',
  '  Go:             go install github.com/nats-io/nats-server/v2@latest',
  'or point agentbus at a running server with --nats URL or NATS_URL.',
].join('\n');

/** Error raised when the `nats-server` binary is missing. */
export class NatsServerMissingError extends Error {
  constructor() {
    super(INSTALL_HINT);
    this.name = 'NatsServerMissingError';
  }
}

async function freePort(): Promise<number> {
  return new Promise((resolve, reject) => {
    const server = createServer();
    server.on('error', reject);
    server.listen(0, '127.0.0.1', () => {
      const address = server.address();
      server.close(() => (typeof address === 'object' && address ? resolve(address.port) : reject(new Error('no free port'))));
    });
  });
}

/** True when `nats-server` can be run from the PATH. */
export function hasNatsServer(binary = 'nats-server'): boolean {
  const result = spawnSync(binary, ['--version'], { stdio: 'ignore' });
  return result.error === undefined && result.status === 0;
}

/**
 * Starts `nats-server` on a free loopback port with JetStream stored under `<stateDir>/nats`.
 * Rejects with {@link NatsServerMissingError} when the binary is not installed.
 */
export async function startEmbeddedNats(options: { stateDir: string; binary?: string; signal?: AbortSignal; timeoutMs?: number }): Promise<EmbeddedNats> {
  const binary = options.binary ?? 'nats-server';
  if (!hasNatsServer(binary)) throw new NatsServerMissingError();
  const storeDir = join(options.stateDir, 'nats');
  await mkdir(storeDir, { recursive: true });
  const port = await freePort();
  const child: ChildProcess = spawn(binary, ['-a', '127.0.0.1', '-p', String(port), '-js', '-sd', storeDir, '-n', 'agentbus-embedded'], {
    stdio: ['ignore', 'ignore', 'pipe'],
  });
  let output = '';
  await new Promise<void>((resolve, reject) => {
    const timer = setTimeout(() => fail(new Error(`nats-server did not start within ${options.timeoutMs ?? 15_000} ms:\n${output}`)), options.timeoutMs ?? 15_000);
    const onAbort = () => fail(new Error('cancelled while starting nats-server'));
    options.signal?.addEventListener('abort', onAbort, { once: true });
    function done() {
      clearTimeout(timer);
      options.signal?.removeEventListener('abort', onAbort);
    }
    function fail(error: Error) {
      done();
      child.kill('SIGTERM');
      reject(error);
    }
    child.stderr?.on('data', (chunk: Buffer) => {
      output += chunk.toString();
      if (output.includes('Server is ready')) {
        done();
        resolve();
      }
    });
    child.once('exit', (code) => fail(new Error(`nats-server exited (${code}) while starting:\n${output}`)));
  });
  child.removeAllListeners('exit');
  const exited = new Promise<void>((resolve) => child.once('exit', () => resolve()));
  return {
    url: `nats://127.0.0.1:${port}`,
    pid: child.pid ?? 0,
    async stop() {
      if (child.exitCode === null && child.signalCode === null) child.kill('SIGTERM');
      await exited;
    },
  };
}
