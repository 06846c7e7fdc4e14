import { headerSecrets } from '../scrub/index.ts';

/** Where an MCP server is: a command `agentbus mcp` starts and talks to over stdio, or a streamable-HTTP endpoint. */
export type McpSource =
  | {
      readonly kind: 'stdio';
      readonly command: string;
      readonly args: readonly string[];
      /** The server's environment (see {@link mcpServerEnvironment}). */
      readonly env: Readonly<Record<string, string>>;
      readonly cwd?: string;
    }
  | {
      readonly kind: 'http';
      readonly url: URL;
      /** Sent with every request (`Authorization`, …). */
      readonly headers: Readonly<Record<string, string>>;
    };

/** Variables of `agentbus mcp`'s own environment that its MCP server is not given: the bus and its credentials. */
const PRIVATE_VARIABLE = /^(NATS_|AGENTBUS_)/;

/**
 * The environment a stdio MCP server starts with: that of `agentbus mcp`, less the variables of the bus (`NATS_*`,
 * `AGENTBUS_*`: its URL, user, password, token and TLS files), which are `agentbus mcp`'s and not the server's. Other
 * variables pass, since MCP servers commonly read their own keys (`GITHUB_TOKEN`, …) from the environment. This keeps
 * the bus credentials from being exposed by accident only: a server running as the same user can read
 * `/proc/<ppid>/environ`.
 */
export function mcpServerEnvironment(env: NodeJS.ProcessEnv): Record<string, string> {
  const kept: Record<string, string> = {};
  for (const [name, value] of Object.entries(env)) if (value !== undefined && !PRIVATE_VARIABLE.test(name)) kept[name] = value;
  return kept;
}

/** A short name of the server for messages: its command line, or its URL without credentials and query. */
export function describeMcpSource(source: McpSource): string {
  if (source.kind === 'stdio') return [source.command, ...source.args].join(' ');
  return `${source.url.origin}${source.url.pathname}`;
}

/** Query parameters whose values are taken for secrets (`?api_key=…`, `?token=…`, `?sig=…`). */
const SECRET_PARAMETER = /key|token|secret|password|passwd|auth|sig|credential/i;

/** A URL component decoded, or as it is when it is no valid percent-encoding (a raw `%` in a password). */
function decodeLeniently(component: string): string {
  try {
    return decodeURIComponent(component);
  } catch {
    return component;
  }
}

/**
 * What of a source must never be printed, for a scrubber: the secrets of its headers ({@link headerSecrets}), the
 * URL's password and the values of query parameters named like secrets. A stdio source has none of its own (its
 * secrets are in the environment).
 *
 * @example
 * mcpSourceSecrets({ kind: 'http', url: new URL('https://mcp.example/mcp'), headers: { Authorization: 'Bearer abc123def' } });
 * // ['Bearer abc123def', 'abc123def']
 */
export function mcpSourceSecrets(source: McpSource): string[] {
  if (source.kind === 'stdio') return [];
  const secrets = headerSecrets(source.headers);
  const password = source.url.password;
  if (password) {
    secrets.push(password);
    const decoded = decodeLeniently(password);
    if (decoded !== password) secrets.push(decoded);
  }
  for (const [name, value] of source.url.searchParams) if (SECRET_PARAMETER.test(name) && value) secrets.push(value);
  return secrets;
}
