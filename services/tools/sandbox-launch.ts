import { ErrorCode, ToolError } from '../../src/errors.ts';
import { BWRAP_INSTALL_HINT, SANDBOX_PATH, bwrapArguments, bwrapFailure, findProgram, sandboxHiddenPaths } from '../../src/sandbox/index.ts';
import type { CommandSandbox } from './sandbox-config.ts';

/** The only variables an unsandboxed command inherits (`AGENTBUS_UNSAFE_NO_SANDBOX=1`): the worker's secrets stay out of its environment, but not out of its reach. */
export const UNSANDBOXED_ENVIRONMENT = ['PATH', 'HOME', 'USER', 'LOGNAME', 'LANG', 'LC_ALL', 'LC_CTYPE', 'TERM', 'TMPDIR', 'TZ', 'SHELL'] as const;

/** The environment of a sandboxed command, all of it (nothing of the worker's). */
export const SANDBOXED_ENVIRONMENT: Readonly<Record<string, string>> = { LANG: 'C.UTF-8' };

/** What to spawn for one command. */
export interface CommandLaunch {
  readonly program: string;
  readonly args: readonly string[];
  readonly env: NodeJS.ProcessEnv;
  readonly cwd: string;
  /** False only under `AGENTBUS_UNSAFE_NO_SANDBOX=1`. */
  readonly sandboxed: boolean;
}

/** Where a command runs: the tenant's workspace (real path), a directory in it, and the argv. */
export interface CommandPlace {
  readonly workspace: string;
  readonly cwd: string;
  readonly command: readonly [string, ...string[]];
  /** The workspace's hidden paths, resolved through symlinks (`Workspace.hiddenPaths`); the sandbox covers those inside it. */
  readonly hidden?: readonly string[];
}

// Moved to src/sandbox/ (the MCP sandbox covers the state folder too); still exported here for callers of this module.
export { sandboxHiddenPaths };

function unsandboxedEnvironment(env: NodeJS.ProcessEnv): NodeJS.ProcessEnv {
  const kept: NodeJS.ProcessEnv = {};
  for (const name of UNSANDBOXED_ENVIRONMENT) if (env[name] !== undefined) kept[name] = env[name];
  return kept;
}

/**
 * How to start a command under `sandbox`: `bwrap` with the arguments of {@link bwrapArguments} (bwrap itself started
 * with an empty environment, since the sandbox's `/proc/1/environ` is bwrap's), or, with no sandbox, the program
 * itself with a filtered copy of `workerEnv`. Throws a {@link ToolError} `unsupported` naming the install command when
 * bwrap is not installed (looked up on {@link SANDBOX_PATH} unless configured as a path).
 */
export async function commandLaunch(sandbox: CommandSandbox, place: CommandPlace, workerEnv: NodeJS.ProcessEnv): Promise<CommandLaunch> {
  if (sandbox.kind === 'none') {
    const [program, ...args] = place.command;
    return { program, args, env: unsandboxedEnvironment(workerEnv), cwd: place.cwd, sandboxed: false };
  }
  const bwrap = await findProgram(sandbox.bwrap, SANDBOX_PATH);
  if (bwrap === undefined) {
    throw new ToolError(ErrorCode.unsupported, `run_command runs commands in a bubblewrap sandbox, and this tools worker has no ${JSON.stringify(sandbox.bwrap)}: ${BWRAP_INSTALL_HINT}, or set AGENTBUS_UNSAFE_NO_SANDBOX=1 to run commands without a sandbox`);
  }
  const args = bwrapArguments({
    workspace: place.workspace,
    cwd: place.cwd,
    command: place.command,
    network: sandbox.network,
    env: SANDBOXED_ENVIRONMENT,
    readOnlyPaths: sandbox.readOnlyPaths,
    hiddenPaths: await sandboxHiddenPaths(place.workspace, place.hidden ?? []),
  });
  return { program: bwrap, args, env: {}, cwd: place.cwd, sandboxed: true };
}

/**
 * The error of a sandboxed run that never got to run its command: the program is not in the sandbox (`not_found`), or
 * bwrap could not build the sandbox (`tool_failed`, with what a container needs). Undefined when the command ran.
 */
export function sandboxStartError(exitCode: number | null, stderr: string, program: string): ToolError | undefined {
  const failure = bwrapFailure(exitCode, stderr);
  if (failure?.kind === 'program_missing') {
    return new ToolError(ErrorCode.notFound, `no program ${JSON.stringify(program)} in the sandbox (${failure.message}); the sandbox has the system's /usr, /bin and /sbin and the workspace`);
  }
  if (failure?.kind === 'setup') {
    return new ToolError(
      ErrorCode.toolFailed,
      `the command sandbox could not start (bwrap: ${failure.message}); inside a container bwrap needs user namespaces or CAP_SYS_ADMIN (see docs/tools.md, "run_command")`,
    );
  }
  return undefined;
}
