import { execFileSync, spawn, spawnSync } from 'node:child_process';
import type { ChildProcess } from 'node:child_process';
import { chmod, mkdir, rename, writeFile } from 'node:fs/promises';
import { createServer } from 'node:net';
import { join } from 'node:path';

/** A `nats-server` process with JetStream on, listening on loopback. */
export interface NatsServerProcess {
  readonly url: string;
  readonly port: number;
  readonly storeDir: string;
  /** The server's process id (a new one after `restart`). */
  readonly pid: number | undefined;
  /** Stops the server and starts it again on the same port and store: clients see a disconnect. */
  restart(): Promise<void>;
  /** SIGTERM, then waits for the exit. The store stays. */
  stop(): Promise<void>;
}

/** Options of {@link startNatsServerProcess}. */
export interface NatsServerOptions {
  /** JetStream's store; the config file is written here too, readable by its owner alone (it may hold secrets). */
  readonly storeDir: string;
  /** Default: a free loopback port. */
  readonly port?: number;
  /** More server configuration text (users, limits, …). */
  readonly config?: string;
  /** Default `nats-server` from the PATH. */
  readonly binary?: string;
  readonly timeoutMs?: number;
  readonly signal?: AbortSignal;
}

/** A free TCP port on 127.0.0.1. */
export function freePort(): Promise<number> {
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

/** True when `binary` runs. */
export function hasNatsServer(binary = 'nats-server'): boolean {
  const result = spawnSync(binary, ['--version'], { stdio: 'ignore' });
  return result.error === undefined && result.status === 0;
}

/** The `nats-server --version` line without its prefix, e.g. `v2.9.10`. */
export function natsServerVersion(binary = 'nats-server'): string {
  return execFileSync(binary, ['--version'], { encoding: 'utf8' }).trim().replace(/^nats-server:\s*/, '');
}

/**
 * Starts `nats-server` with JetStream in `storeDir` and waits until it says it is ready. The CLI's
 * embedded bus, the tests and the bench all start their servers through this.
 */
export async function startNatsServerProcess(options: NatsServerOptions): Promise<NatsServerProcess> {
  const binary = options.binary ?? 'nats-server';
  const port = options.port ?? (await freePort());
  await mkdir(options.storeDir, { recursive: true });
  const configFile = join(options.storeDir, 'server.conf');
  // Written to a new file of mode 0600 and moved over the old one: the file an earlier run left may have been readable
  // by others (and held open by them).
  const partial = `${configFile}.${process.pid}.tmp`;
  await writeFile(partial, `listen: "127.0.0.1:${port}"\njetstream { store_dir: ${JSON.stringify(options.storeDir)} }\n${options.config ?? ''}\n`, { mode: 0o600 });
  await chmod(partial, 0o600);
  await rename(partial, configFile);
  const launch = () => launchServer(binary, configFile, options.timeoutMs ?? 15_000, options.signal);
  let child = await launch();
  return {
    url: `nats://127.0.0.1:${port}`,
    port,
    storeDir: options.storeDir,
    get pid() {
      return child.pid;
    },
    async restart() {
      await halt(child);
      child = await launch();
    },
    stop: () => halt(child),
  };
}

async function launchServer(binary: string, configFile: string, timeoutMs: number, signal?: AbortSignal): Promise<ChildProcess> {
  signal?.throwIfAborted();
  const child = spawn(binary, ['-c', configFile], { stdio: ['ignore', 'ignore', 'pipe'] });
  let output = '';
  await new Promise<void>((resolve, reject) => {
    const fail = (error: Error) => {
      cleanup();
      child.kill('SIGTERM');
      reject(error);
    };
    // A binary that is not there fails the spawn itself (ENOENT on the error's `code`).
    const onError = (error: Error) => fail(error);
    const onData = (chunk: Buffer) => {
      output += chunk.toString();
      if (!output.includes('Server is ready')) return;
      cleanup();
      resolve();
    };
    const onExit = (code: number | null) => fail(new Error(`nats-server exited (${code}) while starting:\n${output}`));
    const onAbort = () => fail(new Error('cancelled while starting nats-server'));
    const timer = setTimeout(() => fail(new Error(`nats-server did not start within ${timeoutMs} ms:\n${output}`)), timeoutMs);
    function cleanup() {
      clearTimeout(timer);
      child.stderr?.off('data', onData);
      child.off('exit', onExit);
      child.off('error', onError);
      signal?.removeEventListener('abort', onAbort);
    }
    child.stderr?.on('data', onData);
    child.once('exit', onExit);
    child.once('error', onError);
    signal?.addEventListener('abort', onAbort, { once: true });
  });
  // Keep reading its log so the pipe never fills, without keeping it.
  child.stderr?.resume();
  return child;
}

async function halt(child: ChildProcess): Promise<void> {
  if (child.exitCode !== null || child.signalCode !== null) return;
  const exited = new Promise((resolve) => child.once('exit', resolve));
  child.kill('SIGTERM');
  await exited;
}
