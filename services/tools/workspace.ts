import { realpath } from 'node:fs/promises';
import { isAbsolute, join, relative, resolve } from 'node:path';
import { ErrorCode, InvalidInputError, ToolError } from '../../src/errors.ts';
import { isToken } from '../../src/protocol/index.ts';
import { STATE_DIRECTORY_NAME, isHidden, isInside, realExisting } from './hidden-paths.ts';

/**
 * Where the built-in tools work: one directory for every tenant ({@link createWorkspace}), or one directory per
 * tenant under a root (`createTenantWorkspaces`). Tools ask for the calling tenant's {@link Workspace} on each call.
 */
export interface Workspaces {
  /** The workspace directory, as given (absolute). */
  readonly root: string;
  /** True when each tenant has its own directory `<root>/<tenant>/`. */
  readonly perTenant: boolean;
  /** Absolute paths hidden from the tools besides each workspace's own `.agentbus` (as configured, not resolved). */
  readonly hidden: readonly string[];
  /**
   * The workspace of a call of `tenant`. Throws a {@link ToolError} `invalid_arguments` when `tenant` is no valid
   * token (`[A-Za-z0-9_-]{1,64}`).
   */
  forTenant(tenant: string, options: { signal?: AbortSignal }): Promise<Workspace>;
}

/** A directory the built-in tools may not leave. As {@link Workspaces} it is the same directory for every tenant. */
export interface Workspace extends Workspaces {
  /**
   * Resolves a path a model gave (relative to the root, or absolute inside it) to an absolute path,
   * following symlinks of the part that exists. Throws a {@link ToolError} `invalid_arguments` when
   * the path leaves the workspace, lexically or through a symlink, or when it is or lies inside a hidden path
   * (the workspace's `.agentbus` or one of {@link Workspaces.hidden}), as written or through a symlink.
   */
  resolve(path: string, options: { signal?: AbortSignal }): Promise<string>;
  /**
   * The hidden paths, resolved through symlinks as {@link Workspace.resolve} resolves paths (whether they exist or
   * not): a walk skips what {@link isHidden} finds in them, the sandbox covers those that exist inside the workspace.
   */
  hiddenPaths(options: { signal?: AbortSignal }): Promise<readonly string[]>;
  /** The path relative to the root, for output (`.` for the root). */
  display(absolutePath: string): string;
}

/** Checks a tenant as a directory name: a subject token cannot be `.`, `..` or contain a `/`. */
export function checkTenant(tenant: string): void {
  if (!isToken(tenant)) throw new ToolError(ErrorCode.invalidArguments, `tenant ${JSON.stringify(tenant)} is not a valid token ([A-Za-z0-9_-]{1,64})`);
}

/** Options of {@link createWorkspace} and `createTenantWorkspaces`. */
export interface WorkspaceOptions {
  /**
   * Absolute paths the tools may not see (`AGENTBUS_WORKSPACE_HIDE`): the state folder of the stack serving this
   * workspace. The workspace's own `.agentbus` is hidden whatever this says.
   */
  readonly hide?: readonly string[];
}

/** Checks that every hidden path is absolute; throws {@link InvalidInputError} otherwise. */
export function checkHidden(hide: readonly string[]): readonly string[] {
  for (const path of hide) {
    if (typeof path !== 'string' || !isAbsolute(path) || path.includes('\0')) throw new InvalidInputError(`a hidden path must be absolute, got ${JSON.stringify(path)}`);
  }
  return hide.map((path) => resolve(path));
}

function hiddenError(path: string): ToolError {
  return new ToolError(ErrorCode.invalidArguments, `path ${JSON.stringify(path)} is hidden from the tools: it holds the agentbus stack's own state (its bus store and token)`);
}

function outside(path: string): ToolError {
  return new ToolError(ErrorCode.invalidArguments, `path ${JSON.stringify(path)} is outside the workspace; use a path relative to it`);
}

/**
 * Creates a workspace rooted at `root` (made absolute against the current directory), shared by every tenant: the
 * single-user layout (`AGENTBUS_WORKSPACE_PER_TENANT=0`, and the embedded stack of `agentbus up`). Its `.agentbus`
 * folder and the paths of `options.hide` are hidden: `agentbus up` keeps its bus's store and token there, which no
 * model may read or change. Throws {@link InvalidInputError} when a hidden path is not absolute.
 *
 * @example
 * const workspace = createWorkspace('/srv/project', { hide: ['/srv/state'] });
 * const file = await workspace.resolve('src/index.ts', { signal }); // '/srv/project/src/index.ts'
 * await workspace.resolve('../etc/passwd', { signal }); // throws invalid_arguments
 * await workspace.resolve('.agentbus/stack.json', { signal }); // throws invalid_arguments (hidden)
 */
export function createWorkspace(root: string, options: WorkspaceOptions = {}): Workspace {
  const absoluteRoot = resolve(root);
  const hidden = checkHidden(options.hide ?? []);
  const allHidden = [join(absoluteRoot, STATE_DIRECTORY_NAME), ...hidden];
  let realRoot: Promise<string> | undefined;
  // Paths come back resolved through symlinks, so they are shown relative to the resolved root.
  let shownRoot = absoluteRoot;
  const workspace: Workspace = {
    root: absoluteRoot,
    perTenant: false,
    hidden,
    async forTenant(tenant, options) {
      options.signal?.throwIfAborted();
      checkTenant(tenant);
      return workspace;
    },
    async resolve(path, options) {
      options.signal?.throwIfAborted();
      if (typeof path !== 'string' || path.includes('\0')) throw new ToolError(ErrorCode.invalidArguments, 'path must be a string without NUL bytes');
      const candidate = resolve(absoluteRoot, path === '' ? '.' : path);
      if (!isInside(absoluteRoot, candidate)) throw outside(path);
      if (isHidden(candidate, allHidden)) throw hiddenError(path);
      realRoot ??= realpath(absoluteRoot);
      const [rootReal, candidateReal, hiddenReal] = await Promise.all([realRoot, realExisting(candidate), workspace.hiddenPaths(options)]);
      shownRoot = rootReal;
      if (!isInside(rootReal, candidateReal)) throw outside(path);
      if (isHidden(candidateReal, hiddenReal)) throw hiddenError(path);
      return candidateReal;
    },
    async hiddenPaths(options) {
      options.signal?.throwIfAborted();
      // Resolved on each call, not once: a hidden folder may be made (or replaced by a symlink) while the service runs.
      // One that cannot be resolved (a parent the worker may not enter) is still hidden as written.
      return Promise.all(allHidden.map((path) => realExisting(path).catch(() => path)));
    },
    display(absolutePath) {
      return relative(shownRoot, absolutePath) || '.';
    },
  };
  return workspace;
}
