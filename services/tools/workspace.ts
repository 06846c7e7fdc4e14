import { realpath } from 'node:fs/promises';
import { dirname, isAbsolute, relative, resolve, sep } from 'node:path';
import { ErrorCode, ToolError } from '../../src/errors.ts';
import { isToken } from '../../src/protocol/index.ts';

/**
 * Where the built-in tools work: one directory for every tenant ({@link createWorkspace}), or one directory per
 * tenant under a root (`createTenantWorkspaces`). Tools ask for the calling tenant's {@link Workspace} on each call.
 */
export interface Workspaces {
  /** The workspace directory, as given (absolute). */
  readonly root: string;
  /** True when each tenant has its own directory `<root>/<tenant>/`. */
  readonly perTenant: boolean;
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
   * the path leaves the workspace, lexically or through a symlink.
   */
  resolve(path: string, options: { signal?: AbortSignal }): Promise<string>;
  /** The path relative to the root, for output (`.` for the root). */
  display(absolutePath: string): string;
}

function inside(root: string, candidate: string): boolean {
  const rel = relative(root, candidate);
  return rel === '' || (!rel.startsWith(`..${sep}`) && rel !== '..' && !isAbsolute(rel));
}

/** Checks a tenant as a directory name: a subject token cannot be `.`, `..` or contain a `/`. */
export function checkTenant(tenant: string): void {
  if (!isToken(tenant)) throw new ToolError(ErrorCode.invalidArguments, `tenant ${JSON.stringify(tenant)} is not a valid token ([A-Za-z0-9_-]{1,64})`);
}

function outside(path: string): ToolError {
  return new ToolError(ErrorCode.invalidArguments, `path ${JSON.stringify(path)} is outside the workspace; use a path relative to it`);
}

/** Nearest existing ancestor (or the path itself), resolved through symlinks. */
async function realExisting(path: string): Promise<string> {
  let current = path;
  const missing: string[] = [];
  while (true) {
    try {
      const real = await realpath(current);
      return missing.length === 0 ? real : resolve(real, ...missing.reverse());
    } catch (error) {
      const code = (error as NodeJS.ErrnoException).code;
      const parent = dirname(current);
      if ((code !== 'ENOENT' && code !== 'ENOTDIR') || parent === current) throw error;
      missing.push(relative(parent, current));
      current = parent;
    }
  }
}

/**
 * Creates a workspace rooted at `root` (made absolute against the current directory), shared by every tenant: the
 * single-user layout (`AGENTBUS_WORKSPACE_PER_TENANT=0`, and the embedded stack of `agentbus up`).
 *
 * @example
 * const workspace = createWorkspace('/srv/project');
 * const file = await workspace.resolve('src/index.ts', { signal }); // '/srv/project/src/index.ts'
 * await workspace.resolve('../etc/passwd', { signal }); // throws invalid_arguments
 */
export function createWorkspace(root: string): Workspace {
  const absoluteRoot = resolve(root);
  let realRoot: Promise<string> | undefined;
  // Paths come back resolved through symlinks, so they are shown relative to the resolved root.
  let shownRoot = absoluteRoot;
  const workspace: Workspace = {
    root: absoluteRoot,
    perTenant: false,
    async forTenant(tenant, options) {
      options.signal?.throwIfAborted();
      checkTenant(tenant);
      return workspace;
    },
    async resolve(path, options) {
      options.signal?.throwIfAborted();
      if (typeof path !== 'string' || path.includes('\0')) throw new ToolError(ErrorCode.invalidArguments, 'path must be a string without NUL bytes');
      const candidate = resolve(absoluteRoot, path === '' ? '.' : path);
      if (!inside(absoluteRoot, candidate)) throw outside(path);
      realRoot ??= realpath(absoluteRoot);
      const [rootReal, candidateReal] = await Promise.all([realRoot, realExisting(candidate)]);
      shownRoot = rootReal;
      if (!inside(rootReal, candidateReal)) throw outside(path);
      return candidateReal;
    },
    display(absolutePath) {
      return relative(shownRoot, absolutePath) || '.';
    },
  };
  return workspace;
}
