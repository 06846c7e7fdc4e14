import { InvalidInputError } from '../../src/errors.ts';
import { isToken, TOKEN_PATTERN } from '../../src/protocol/index.ts';
import { parsePort } from '../../src/service/http-basics.ts';

/** The chat gateway's default port (the dashboard has 4280, the A2A server 4281). */
export const DEFAULT_CHAT_PORT = 4282;

/** How the chat gateway serves, and for whom. */
export interface ChatConfig {
  /** Address to bind; loopback unless told otherwise. */
  readonly host: string;
  /** 0 picks a free port. */
  readonly port: number;
  /** Every request must carry it (`Authorization: Bearer`). */
  readonly token: string;
  /** The agentbus tenant whose sessions the chats are. */
  readonly tenant: string;
  /** Origins allowed to call from a browser page elsewhere (CORS); none by default. */
  readonly origins: readonly string[];
}

/**
 * Reads the chat gateway's settings: `AGENTBUS_CHAT_TOKEN` (required, at least 16 characters: the gateway prompts
 * and cancels on the tenant's behalf), `AGENTBUS_CHAT_TENANT` (default `default`), `AGENTBUS_CHAT_PORT` (default
 * 4282), `AGENTBUS_CHAT_HOST` (default 127.0.0.1) and `AGENTBUS_CHAT_ORIGINS` (comma-separated origins for CORS).
 * Throws {@link InvalidInputError} naming the bad setting.
 */
export function readChatConfig(env: NodeJS.ProcessEnv): ChatConfig {
  const token = env.AGENTBUS_CHAT_TOKEN?.trim() ?? '';
  if (token.length < 16) throw new InvalidInputError('AGENTBUS_CHAT_TOKEN must be set, at least 16 characters: every chat request must carry it as a Bearer token');
  const tenant = env.AGENTBUS_CHAT_TENANT?.trim() || 'default';
  if (!isToken(tenant)) throw new InvalidInputError(`AGENTBUS_CHAT_TENANT must match ${TOKEN_PATTERN.source}`);
  const port = env.AGENTBUS_CHAT_PORT === undefined ? DEFAULT_CHAT_PORT : parsePort(env.AGENTBUS_CHAT_PORT, 'AGENTBUS_CHAT_PORT');
  const origins = (env.AGENTBUS_CHAT_ORIGINS ?? '').split(',').map((origin) => origin.trim()).filter((origin) => origin !== '');
  for (const origin of origins) {
    let parsed: URL | undefined;
    try {
      parsed = new URL(origin);
    } catch {
      parsed = undefined;
    }
    if (!parsed || parsed.origin !== origin) throw new InvalidInputError(`AGENTBUS_CHAT_ORIGINS: ${JSON.stringify(origin)} is not an origin such as https://app.example.com`);
  }
  return { host: env.AGENTBUS_CHAT_HOST?.trim() || '127.0.0.1', port, token, tenant, origins };
}
