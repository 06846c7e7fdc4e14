import { randomBytes } from 'node:crypto';
import { join } from 'node:path';
import { startNatsServerProcess } from '../src/nats-server.ts';
import { makePrivateDir } from './state-dir.ts';

/**
 * A nats-server started by the CLI, with JetStream in the project's `.agentbus/` folder. It listens on loopback
 * and lets in only connections that present its token, made afresh for each server: any local user can reach a
 * loopback port, and whoever is on the bus can call `run_command`.
 */
export interface EmbeddedNats {
  readonly url: string;
  /** The server's token: give it to a process as `NATS_TOKEN` (see {@link embeddedBusEnv}), never on a command line. */
  readonly token: string;
  stop(): Promise<void>;
}

/** Random bytes in a token: 256 bits. */
const TOKEN_BYTES = 32;

/**
 * The environment variables that let a process in on an embedded server, added over its own: `NATS_TOKEN`, and a
 * blank `NATS_USER`/`NATS_PASSWORD` so that credentials meant for another server are not offered to this one (a
 * token server refuses a user) and the connection takes no user's inbox prefix.
 *
 * @example
 * spawn(process.execPath, [service], { env: { ...process.env, ...embeddedBusEnv(nats.token) } });
 */
export function embeddedBusEnv(token: string): Record<string, string> {
  return { NATS_TOKEN: token, NATS_USER: '', NATS_PASSWORD: '' };
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

/** Options of {@link startEmbeddedNats}. */
export interface EmbeddedNatsOptions {
  readonly stateDir: string;
  readonly binary?: string;
  /** Default: a free loopback port. Chosen by the caller to tell services the URL before the server is up. */
  readonly port?: number;
  /** Default: a new random one ({@link newEmbeddedToken}). */
  readonly token?: string;
  readonly signal?: AbortSignal;
  readonly timeoutMs?: number;
}

/** A new random token for an embedded server (256 bits, base64url). */
export function newEmbeddedToken(): string {
  return randomBytes(TOKEN_BYTES).toString('base64url');
}

/**
 * Starts `nats-server` on a loopback port with JetStream stored under `<stateDir>/nats`, and a token that every
 * connection must present (`authorization { token }`), new for each server unless given. The token is in the
 * server's config file (mode 0600), not on its command line; `stateDir` is made its owner's alone (mode 0700), the
 * bus's data is in it. Rejects with {@link NatsServerMissingError} when the binary is not installed (the spawn
 * itself fails: no `nats-server --version` is run first).
 */
export async function startEmbeddedNats(options: EmbeddedNatsOptions): Promise<EmbeddedNats> {
  const binary = options.binary ?? 'nats-server';
  await makePrivateDir(options.stateDir);
  const token = options.token ?? newEmbeddedToken();
  const server = await startNatsServerProcess({
    storeDir: join(options.stateDir, 'nats'),
    binary,
    config: `server_name: agentbus-embedded\nauthorization { token: ${JSON.stringify(token)} }`,
    ...(options.port === undefined ? {} : { port: options.port }),
    ...(options.timeoutMs === undefined ? {} : { timeoutMs: options.timeoutMs }),
    ...(options.signal ? { signal: options.signal } : {}),
  }).catch((error: unknown) => {
    throw (error as NodeJS.ErrnoException).code === 'ENOENT' ? new NatsServerMissingError() : error;
  });
  return { url: server.url, token, stop: () => server.stop() };
}
