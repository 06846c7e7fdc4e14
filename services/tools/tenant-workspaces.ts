import { lstat, mkdir, realpath } from 'node:fs/promises';
import { join, resolve } from 'node:path';
import { ErrorCode, ToolError } from '../../src/errors.ts';
import { checkHidden, checkTenant, createWorkspace } from './workspace.ts';
import type { WorkspaceOptions, Workspaces } from './workspace.ts';

/** Mode of a tenant's directory when it is created: its files are the worker's alone. */
const TENANT_DIRECTORY_MODE = 0o700;

/**
 * Workspaces with one directory per tenant, `<root>/<tenant>/`, made on a tenant's first call: a tenant's file tools
 * and commands see its own files and never another tenant's. The tenant's directory must be a real directory (a
 * symlink in its place is refused), and paths are checked against it as in {@link createWorkspace}, symlinks included.
 * The root must exist. Each tenant's `.agentbus` and the paths of `options.hide` are hidden, as in {@link createWorkspace}.
 *
 * @example
 * const workspaces = createTenantWorkspaces('/srv/workspaces');
 * const acme = await workspaces.forTenant('acme', { signal }); // rooted at /srv/workspaces/acme
 * await acme.resolve('../globex/notes.md', { signal }); // throws invalid_arguments
 */
export function createTenantWorkspaces(root: string, options: WorkspaceOptions = {}): Workspaces {
  const absoluteRoot = resolve(root);
  const hidden = checkHidden(options.hide ?? []);
  return {
    root: absoluteRoot,
    perTenant: true,
    hidden,
    async forTenant(tenant, callOptions) {
      callOptions.signal?.throwIfAborted();
      checkTenant(tenant);
      const rootReal = await realpath(absoluteRoot).catch((error: NodeJS.ErrnoException) => {
        throw new ToolError(ErrorCode.toolFailed, `the workspace ${absoluteRoot} cannot be opened (${error.code ?? error.message})`, { cause: error });
      });
      const directory = join(rootReal, tenant);
      await mkdir(directory, { mode: TENANT_DIRECTORY_MODE }).catch((error: NodeJS.ErrnoException) => {
        if (error.code !== 'EEXIST') throw error;
      });
      // Not stat: a symlink named after the tenant (planted by anyone) must not lead the tenant elsewhere.
      const info = await lstat(directory);
      if (!info.isDirectory()) throw new ToolError(ErrorCode.toolFailed, `the workspace of tenant ${tenant} is not a directory; an operator must look at ${directory}`);
      callOptions.signal?.throwIfAborted();
      return createWorkspace(directory, { hide: hidden });
    },
  };
}
