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
 * variables pass, since MCP servers commonly read their own keys (`GITHUB_TOKEN`, …) from the environment.
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
