import { SANDBOX_HOME, bwrapArguments } from '../sandbox/index.ts';
import type { McpSource } from './mcp-source.ts';

/** The process that serves a stdio source: its command line, environment and directory. */
export interface McpLaunch {
  readonly command: string;
  readonly args: string[];
  readonly env: Record<string, string>;
  readonly cwd: string | undefined;
}

/**
 * What to start for a stdio MCP server: the command itself, or with `sandbox` the command under `bwrap` (see
 * `bwrapArguments`): its own PID namespace and `/proc`, the system read-only, `sandbox.workspace` the one writable
 * place (and its working directory) but for `sandbox.hiddenPaths` (covered: the stack's `.agentbus`), a fresh `/tmp` as `HOME`, no network unless `sandbox.network`, and the server's
 * allow-listed environment only (bwrap itself gets the same, since the sandbox's `/proc/1/environ` is bwrap's).
 *
 * @example
 * mcpLaunch({ kind: 'stdio', command: 'node', args: ['server.js'], env: { PATH: '/usr/bin' } });
 * // { command: 'node', args: ['server.js'], env: { PATH: '/usr/bin' }, cwd: undefined }
 */
export function mcpLaunch(source: Extract<McpSource, { kind: 'stdio' }>): McpLaunch {
  const env = { ...source.env };
  const { sandbox } = source;
  if (!sandbox) return { command: source.command, args: [...source.args], env, cwd: source.cwd };
  const args = bwrapArguments({
    workspace: sandbox.workspace,
    cwd: sandbox.workspace,
    command: [source.command, ...source.args],
    network: sandbox.network,
    env: { ...env, HOME: SANDBOX_HOME },
    readOnlyPaths: sandbox.readOnlyPaths,
    hiddenPaths: sandbox.hiddenPaths ?? [],
  });
  return { command: sandbox.bwrap, args, env, cwd: sandbox.workspace };
}
