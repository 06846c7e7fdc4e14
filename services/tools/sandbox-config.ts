import { isAbsolute } from 'node:path';
import { InvalidInputError } from '../../src/errors.ts';

/** How `run_command` isolates what it runs. */
export type CommandSandbox =
  | {
      readonly kind: 'bubblewrap';
      /** The `bwrap` program: a name looked up on the worker's `PATH`, or a path. */
      readonly bwrap: string;
      /** Let commands use the host's network (`AGENTBUS_SANDBOX_NETWORK=1`); off by default. */
      readonly network: boolean;
      /** More absolute paths commands see read-only (`AGENTBUS_SANDBOX_READ_ONLY`, colon-separated). */
      readonly readOnlyPaths: readonly string[];
    }
  /** No sandbox at all (`AGENTBUS_UNSAFE_NO_SANDBOX=1`): commands run as the worker, with its files in reach. */
  | { readonly kind: 'none' };

/** The sandbox `run_command` uses unless configured otherwise: bubblewrap, no network. */
export const DEFAULT_COMMAND_SANDBOX: CommandSandbox = { kind: 'bubblewrap', bwrap: 'bwrap', network: false, readOnlyPaths: [] };

/** What the tools service reads from its environment besides the bus settings. */
export interface ToolsConfig {
  /** `AGENTBUS_WORKSPACE`, default the current directory. */
  readonly workspace: string;
  /** `AGENTBUS_WORKSPACE_PER_TENANT`: each tenant works in `<workspace>/<tenant>/`; default on. */
  readonly perTenant: boolean;
  /**
   * `AGENTBUS_WORKSPACE_HIDE` (absolute paths, colon-separated): hidden from the tools and covered in the sandbox, besides
   * each workspace's own `.agentbus`. `agentbus up` names its state folder here.
   */
  readonly hide: readonly string[];
  readonly sandbox: CommandSandbox;
}

/** Reads a colon-separated list of absolute paths; throws {@link InvalidInputError} on a relative one. */
function absolutePaths(env: NodeJS.ProcessEnv, name: string): string[] {
  const paths = (env[name] ?? '').split(':').filter((path) => path !== '');
  for (const path of paths) {
    if (!isAbsolute(path)) throw new InvalidInputError(`${name} must list absolute paths separated by ':', got ${JSON.stringify(path)}`);
  }
  return paths;
}

/** Reads an on/off variable: `1`/`true`/`yes`/`on` or `0`/`false`/`no`/`off`; unset or empty is `fallback`. */
export function envFlag(env: NodeJS.ProcessEnv, name: string, fallback: boolean): boolean {
  const value = env[name]?.trim().toLowerCase();
  if (value === undefined || value === '') return fallback;
  if (['1', 'true', 'yes', 'on'].includes(value)) return true;
  if (['0', 'false', 'no', 'off'].includes(value)) return false;
  throw new InvalidInputError(`${name} must be 1 or 0 (true/false, yes/no, on/off), got ${JSON.stringify(env[name])}`);
}

/**
 * The tools service's workspace and sandbox settings from its environment: `AGENTBUS_WORKSPACE`,
 * `AGENTBUS_WORKSPACE_PER_TENANT` (default 1), `AGENTBUS_WORKSPACE_HIDE`, `AGENTBUS_UNSAFE_NO_SANDBOX` (default 0),
 * `AGENTBUS_SANDBOX_NETWORK` (default 0) and `AGENTBUS_SANDBOX_READ_ONLY`. Throws {@link InvalidInputError} on a value
 * it cannot read.
 *
 * @example
 * toolsConfigFromEnv({ AGENTBUS_WORKSPACE: '/srv/ws' }, '/app');
 * // { workspace: '/srv/ws', perTenant: true, hide: [], sandbox: { kind: 'bubblewrap', bwrap: 'bwrap', network: false, readOnlyPaths: [] } }
 */
export function toolsConfigFromEnv(env: NodeJS.ProcessEnv, cwd: string): ToolsConfig {
  const workspace = env['AGENTBUS_WORKSPACE'] || cwd;
  const perTenant = envFlag(env, 'AGENTBUS_WORKSPACE_PER_TENANT', true);
  const hide = absolutePaths(env, 'AGENTBUS_WORKSPACE_HIDE');
  if (envFlag(env, 'AGENTBUS_UNSAFE_NO_SANDBOX', false)) return { workspace, perTenant, hide, sandbox: { kind: 'none' } };
  const readOnlyPaths = absolutePaths(env, 'AGENTBUS_SANDBOX_READ_ONLY');
  return { workspace, perTenant, hide, sandbox: { kind: 'bubblewrap', bwrap: 'bwrap', network: envFlag(env, 'AGENTBUS_SANDBOX_NETWORK', false), readOnlyPaths } };
}
