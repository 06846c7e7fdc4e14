import { createInbox } from '@nats-io/nats-core';
import type { ConnectionOptions, NatsConnection } from '@nats-io/nats-core';

/** nats.js' inbox prefix when a connection names none. No agentbus user may subscribe to it. */
export const DEFAULT_INBOX_PREFIX = '_INBOX';

/**
 * Each service's reply-inbox prefix (`deploy/nats/nats-server.conf` lets each service user subscribe to its own
 * only). A tenant's or any other user's is {@link userInboxPrefix}.
 */
export const ServiceInboxPrefix = {
  runtime: '_INBOX_runtime',
  provider: '_INBOX_provider',
  tools: '_INBOX_tools',
  memory: '_INBOX_memory',
  dashboard: '_INBOX_dashboard',
  /** A tool hook process (the `hooks` user). */
  hooks: '_INBOX_hooks',
  /** The Synadia Agent Protocol host (the `agents` user), which prompts sessions as a client does. */
  agents: '_INBOX_agents',
  /** The chat gateway (the `chat` user), which prompts one tenant's sessions for browsers (AI SDK UI streams). */
  chat: '_INBOX_chat',

  /** The A2A server (the `a2a` user), a client of one tenant's sessions. */
  a2a: '_INBOX_a2a',
} as const;
export type ServiceInboxPrefix = (typeof ServiceInboxPrefix)[keyof typeof ServiceInboxPrefix];

const USER_TOKEN = /^[A-Za-z0-9_-]{1,64}$/;

/**
 * The inbox prefix of a NATS user named after what it is (`acme` → `_INBOX_acme`, `client` → `_INBOX_client`), or
 * undefined when the name cannot be one subject token.
 */
export function userInboxPrefix(user: string): string | undefined {
  return USER_TOKEN.test(user) ? `_INBOX_${user}` : undefined;
}

/**
 * The inbox prefix a connection was made with (nats.js' `inboxPrefix` option), `_INBOX` when it has none. Every
 * reply subject agentbus makes on a connection starts with it, as nats.js' own requests, consumers and watchers do,
 * so that a user allowed to subscribe only to its own prefix gets its replies.
 */
export function inboxPrefixOf(nc: NatsConnection): string {
  // nats.js keeps the connect options on the connection object; its JetStream client reads the prefix there too.
  const options = (nc as NatsConnection & { readonly options?: ConnectionOptions }).options;
  return options?.inboxPrefix || DEFAULT_INBOX_PREFIX;
}

/**
 * A fresh inbox subject under the connection's prefix: `<prefix>.<nuid>`.
 *
 * @example
 * const inbox = createConnectionInbox(nc); // '_INBOX_tools.Hc4…' on a connection made with inboxPrefix '_INBOX_tools'
 */
export function createConnectionInbox(nc: NatsConnection): string {
  return createInbox(inboxPrefixOf(nc));
}
