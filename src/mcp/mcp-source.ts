import type { SandboxHiddenPath } from '../sandbox/index.ts';
import { headerSecrets } from '../scrub/index.ts';

/** How `agentbus mcp --sandbox` runs a stdio server: under bubblewrap, as `run_command` runs commands. */
export interface McpSandbox {
  /** The absolute path of `bwrap`. */
  readonly bwrap: string;
  /** The one writable directory (absolute, symlink-free), mounted at its own path; the server starts in it. */
  readonly workspace: string;
  /** Share the host's network (`--sandbox-network`). */
  readonly network: boolean;
  /** More paths the server sees read-only (`--sandbox-read DIR`). */
  readonly readOnlyPaths: readonly string[];
  /**
   * Paths inside `workspace` the server may neither read nor change (see `sandboxHiddenPaths`): the state folder of
   * `agentbus up` there (`.agentbus`, the bus's token and store) and those of `AGENTBUS_WORKSPACE_HIDE`.
   */
  readonly hiddenPaths?: readonly SandboxHiddenPath[];
}

/** Where an MCP server is: a command `agentbus mcp` starts and talks to over stdio, or a streamable-HTTP endpoint. */
export type McpSource =
  | {
      readonly kind: 'stdio';
      readonly command: string;
      readonly args: readonly string[];
      /** The server's environment (see {@link mcpServerEnvironment}). */
      readonly env: Readonly<Record<string, string>>;
      readonly cwd?: string;
      /** Run the server under bubblewrap (`--sandbox`); see {@link mcpLaunch}. */
      readonly sandbox?: McpSandbox;
    }
  | {
      readonly kind: 'http';
      readonly url: URL;
      /** Sent with every request (`Authorization`, …). */
      readonly headers: Readonly<Record<string, string>>;
    };

/** The variables a stdio MCP server always gets from `agentbus mcp`'s environment; `--env NAME` adds more. */
export const MCP_SERVER_ENVIRONMENT = ['PATH', 'HOME', 'LANG'] as const;

/**
 * The environment a stdio MCP server starts with: {@link MCP_SERVER_ENVIRONMENT} and the variables `allowed` names
 * (`--env GITHUB_TOKEN`), those that are set; nothing else of `agentbus mcp`'s environment, which holds the bus's
 * credentials and often keys the server has no business with. (The MCP SDK adds `USER`, `LOGNAME`, `SHELL` and `TERM`.)
 * A server running as the same user can still read `/proc/<ppid>/environ` unless it runs with `--sandbox`.
 *
 * @example
 * mcpServerEnvironment({ PATH: '/bin', GITHUB_TOKEN: 'g', NATS_PASSWORD: 'p' }, ['GITHUB_TOKEN']); // { PATH: '/bin', GITHUB_TOKEN: 'g' }
 */
export function mcpServerEnvironment(env: NodeJS.ProcessEnv, allowed: readonly string[] = []): Record<string, string> {
  const kept: Record<string, string> = {};
  for (const name of [...MCP_SERVER_ENVIRONMENT, ...allowed]) {
    const value = env[name];
    if (value !== undefined) kept[name] = value;
  }
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
