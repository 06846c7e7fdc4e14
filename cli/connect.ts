import { connect } from '@nats-io/transport-node';
import type { NatsConnection } from '@nats-io/nats-core';
import { busCredentialsFromEnv, busTlsFromEnv, splitServers, tlsConnectOption } from '../src/bus/connect.ts';
import { userInboxPrefix } from '../src/bus/inbox.ts';
import { replyPolicyFromBus } from '../src/bus/reply-guard.ts';
import type { ReplyPolicy } from '../src/bus/reply-guard.ts';

/**
 * The inbox prefix of a CLI connection: `AGENTBUS_INBOX_PREFIX`, or else the one of the NATS user it logs in as
 * (`NATS_USER=acme` → `_INBOX_acme`: tenant users are named after their tenant, and each may subscribe to its own
 * inbox only), or else nats.js' default (a server without users).
 */
export function cliInboxPrefix(env: NodeJS.ProcessEnv): string | undefined {
  const explicit = env.AGENTBUS_INBOX_PREFIX?.trim();
  if (explicit) return explicit;
  const user = env.NATS_USER?.trim();
  return user ? userInboxPrefix(user) : undefined;
}

/**
 * The reply policy of a command that answers requests (`worker`, `mcp`): that of the connection {@link connectCli}
 * makes from the same environment (sealed under a user name), with `AGENTBUS_TRUSTED_INBOXES`.
 */
export function cliReplyPolicy(env: NodeJS.ProcessEnv): ReplyPolicy {
  return replyPolicyFromBus({ ...busCredentialsFromEnv(env), ...busTlsFromEnv(env), inboxPrefix: cliInboxPrefix(env) }, env);
}

/**
 * Connects a CLI command to the bus, with `NATS_USER`/`NATS_PASSWORD` or `NATS_TOKEN` when set, the TLS files of
 * `NATS_CA`, `NATS_CERT` and `NATS_KEY`, and the inbox prefix of {@link cliInboxPrefix}. A command that serves or
 * follows until stopped (`worker`, `mcp`, `tail`) passes `reconnectForever`, as the services do: nats.js' default
 * gives up after 10 tries, about 20 s, and a NATS restart longer than that would end the process.
 */
export function connectCli(url: string, name: string, env: NodeJS.ProcessEnv, options: { reconnectForever?: boolean } = {}): Promise<NatsConnection> {
  const inboxPrefix = cliInboxPrefix(env);
  const { tls } = busTlsFromEnv(env);
  const servers = splitServers(url);
  return connect({
    servers,
    name,
    timeout: 5000,
    ...(options.reconnectForever ? { maxReconnectAttempts: -1, reconnectTimeWait: 500 } : {}),
    ...busCredentialsFromEnv(env),
    ...(inboxPrefix ? { inboxPrefix } : {}),
    ...tlsConnectOption(servers, tls),
  });
}
