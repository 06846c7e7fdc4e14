import { connect } from '@nats-io/transport-node';
import type { NatsConnection } from '@nats-io/nats-core';
import { InvalidInputError } from '../errors.ts';
import type { Logger } from '../logging.ts';

/** Files of a TLS connection (PEM): the CA that signed the server's certificate, and a client certificate for mutual TLS. */
export interface BusTlsOptions {
  readonly caFile?: string;
  readonly certFile?: string;
  readonly keyFile?: string;
}

/** Options of a bus connection. */
export interface BusConnectOptions {
  /** A server URL, several comma-separated (a cluster), or a list. */
  readonly servers: string | string[];
  /** Connection name, shown by `nats server report connections`. */
  readonly name: string;
  readonly logger: Logger;
  readonly user?: string;
  readonly pass?: string;
  readonly token?: string;
  /**
   * The prefix of every reply subject made on the connection (nats.js' `inboxPrefix`: requests, JetStream
   * consumers and watchers, agentbus' reply mux), so that the user's permissions can let it subscribe to its own
   * replies only: `_INBOX_runtime` for the runtime ({@link ServiceInboxPrefix}). Default `_INBOX`.
   */
  readonly inboxPrefix?: string;
  /**
   * TLS: the connection is refused unless the server speaks TLS with a certificate these files (or, with none, the
   * system's CAs) trust. A `tls://` server URL asks for TLS as well.
   */
  readonly tls?: BusTlsOptions;
  /** Give up the first connect after this long; reconnects after a first success never give up. */
  readonly connectTimeoutMs?: number;
}

/**
 * The credentials of {@link connectBus} from the environment: `NATS_USER` with `NATS_PASSWORD`, or
 * `NATS_TOKEN`; empty when neither is set (a server without auth).
 *
 * @example
 * const nc = await connectBus({ servers: env.NATS_URL, name: 'agentbus-tools', logger, ...busCredentialsFromEnv(env) });
 */
export function busCredentialsFromEnv(env: NodeJS.ProcessEnv): Pick<BusConnectOptions, 'user' | 'pass' | 'token'> {
  const user = env.NATS_USER?.trim();
  const token = env.NATS_TOKEN?.trim();
  return { ...(user ? { user, pass: env.NATS_PASSWORD ?? '' } : {}), ...(token ? { token } : {}) };
}

/**
 * The TLS files of {@link connectBus} from the environment, named as the `nats` CLI names them: `NATS_CA` (the CA
 * that signed the server's certificate), `NATS_CERT` and `NATS_KEY` (a client certificate, for a server that
 * verifies clients). Empty when none is set. Throws when only one of `NATS_CERT` and `NATS_KEY` is set.
 */
export function busTlsFromEnv(env: NodeJS.ProcessEnv): Pick<BusConnectOptions, 'tls'> {
  const caFile = env.NATS_CA?.trim();
  const certFile = env.NATS_CERT?.trim();
  const keyFile = env.NATS_KEY?.trim();
  if (Boolean(certFile) !== Boolean(keyFile)) throw new InvalidInputError('NATS_CERT and NATS_KEY go together: set both for a client certificate, or neither');
  if (!caFile && !certFile) return {};
  return { tls: { ...(caFile ? { caFile } : {}), ...(certFile && keyFile ? { certFile, keyFile } : {}) } };
}

/**
 * What a service's connection takes from the environment: the credentials ({@link busCredentialsFromEnv}), the TLS
 * files ({@link busTlsFromEnv}) and its inbox prefix, `AGENTBUS_INBOX_PREFIX` or else the service's own.
 *
 * @example
 * const nc = await connectBus({ servers: env.NATS_URL, name: 'agentbus-tools', logger, ...busOptionsFromEnv(env, ServiceInboxPrefix.tools) });
 */
export function busOptionsFromEnv(env: NodeJS.ProcessEnv, inboxPrefix: string): Pick<BusConnectOptions, 'user' | 'pass' | 'token' | 'tls' | 'inboxPrefix'> {
  return { ...busCredentialsFromEnv(env), ...busTlsFromEnv(env), inboxPrefix: env.AGENTBUS_INBOX_PREFIX?.trim() || inboxPrefix };
}

/**
 * Connects to NATS with reconnects that never give up, and logs status changes.
 *
 * @example
 * const nc = await connectBus({ servers: 'nats://127.0.0.1:4222', name: 'agentbus-runtime', logger });
 */
export async function connectBus(options: BusConnectOptions): Promise<NatsConnection> {
  const nc = await connect({
    servers: splitServers(options.servers),
    name: options.name,
    maxReconnectAttempts: -1,
    reconnectTimeWait: 500,
    pingInterval: 20_000,
    timeout: options.connectTimeoutMs ?? 10_000,
    // nats.js otherwise builds an Error (a captured stack) for every request and JetStream publish, only to
    // show the caller in a timeout's trace; our request layer rethrows its own errors with the subject instead.
    noAsyncTraces: true,
    ...(options.user === undefined ? {} : { user: options.user, pass: options.pass ?? '' }),
    ...(options.token === undefined ? {} : { token: options.token }),
    ...(options.inboxPrefix === undefined ? {} : { inboxPrefix: options.inboxPrefix }),
    ...tlsConnectOption(splitServers(options.servers), options.tls),
  });
  void (async () => {
    for await (const status of nc.status()) {
      if (status.type === 'ping') continue;
      const level = status.type === 'disconnect' || status.type === 'error' ? 'warn' : 'info';
      options.logger[level]({ status: status.type, server: 'server' in status ? status.server : undefined }, 'nats status');
    }
  })().catch((err: unknown) => options.logger.warn({ err }, 'nats status watcher stopped'));
  return nc;
}

/**
 * The servers of a URL that may list a cluster's, comma-separated (`NATS_URL=nats://a:4222,nats://b:4222`):
 * nats.js reads such a string as one server.
 */
export function splitServers(servers: string | readonly string[]): string[] {
  return (typeof servers === 'string' ? servers.split(',') : [...servers]).map((url) => url.trim()).filter(Boolean);
}

/**
 * nats.js' `tls` option: the files when given, else TLS with the system's CAs for a `tls://` URL (nats.js itself
 * reads no scheme), else none: then the connection uses TLS only when the server asks for it.
 */
export function tlsConnectOption(servers: string | readonly string[], tls: BusTlsOptions | undefined): { tls?: BusTlsOptions } {
  if (tls) return { tls };
  return splitServers(servers).some((server) => /^tls:\/\//i.test(server)) ? { tls: {} } : {};
}

/**
 * On SIGTERM or SIGINT runs `beforeDrain` (when given), then drains the connection. Returns a function that
 * removes the handlers.
 */
export function drainOnSignals(nc: NatsConnection, logger: Logger, beforeDrain?: () => Promise<void>): () => void {
  let draining = false;
  const handler = (signal: NodeJS.Signals) => {
    if (draining) return;
    draining = true;
    logger.info({ signal }, 'draining');
    void (async () => {
      try {
        await beforeDrain?.();
        await nc.drain();
      } catch (err) {
        logger.warn({ err }, 'drain failed');
      }
    })();
  };
  process.on('SIGTERM', handler);
  process.on('SIGINT', handler);
  return () => {
    process.off('SIGTERM', handler);
    process.off('SIGINT', handler);
  };
}
