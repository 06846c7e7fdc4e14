import { join } from 'node:path';
import { hasNatsServer, startNatsServerProcess } from '../nats-server.ts';

/** A nats-server started by the CLI, with JetStream in the project's `.agentbus/` folder. */
export interface EmbeddedNats {
  readonly url: string;
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

/**
 * Starts `nats-server` on a free loopback port with JetStream stored under `<stateDir>/nats`.
 * Rejects with {@link NatsServerMissingError} when the binary is not installed.
 */
export async function startEmbeddedNats(options: { stateDir: string; binary?: string; signal?: AbortSignal; timeoutMs?: number }): Promise<EmbeddedNats> {
  const binary = options.binary ?? 'nats-server';
  if (!hasNatsServer(binary)) throw new NatsServerMissingError();
  const server = await startNatsServerProcess({
    storeDir: join(options.stateDir, 'nats'),
    binary,
    config: 'server_name: agentbus-embedded',
    ...(options.timeoutMs === undefined ? {} : { timeoutMs: options.timeoutMs }),
    ...(options.signal ? { signal: options.signal } : {}),
  });
  return { url: server.url, stop: () => server.stop() };
}
