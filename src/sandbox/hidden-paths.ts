import { lstat, realpath } from 'node:fs/promises';
import { dirname, isAbsolute, relative, resolve, sep } from 'node:path';
import type { SandboxHiddenPath } from './bwrap-arguments.ts';

/**
 * The name of agentbus's state folder in a project folder (`agentbus up`'s `.agentbus/`: the embedded bus's store,
 * its token, `stack.json`). Every workspace and sandbox hides its own `<root>/.agentbus`.
 */
export const STATE_DIRECTORY_NAME = '.agentbus';

/** True when `candidate` is `root` or lies inside it (both absolute, compared as written). */
export function isInside(root: string, candidate: string): boolean {
  const rel = relative(root, candidate);
  return rel === '' || (!rel.startsWith(`..${sep}`) && rel !== '..' && !isAbsolute(rel));
}

/** The path resolved through symlinks: its nearest existing ancestor (or itself) resolved, the missing rest appended. */
export async function realExisting(path: string): Promise<string> {
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
 * The hidden paths the sandbox must cover: those of `hidden` (absolute, resolved through symlinks) that exist and lie
 * inside `workspace`, outermost only. A missing one is left out, since bwrap would make its mount point in the host's
 * workspace; one outside the workspace is not in the sandbox.
 *
 * @example
 * await sandboxHiddenPaths('/srv/p', ['/srv/p/.agentbus', '/etc']); // [{ path: '/srv/p/.agentbus', kind: 'directory' }]
 */
export async function sandboxHiddenPaths(workspace: string, hidden: readonly string[]): Promise<SandboxHiddenPath[]> {
  const found: SandboxHiddenPath[] = [];
  for (const path of new Set(hidden)) {
    if (!isInside(workspace, path)) continue;
    // One inside another is covered with it; mounting it too would need a mount point in the read-only tmpfs.
    if (hidden.some((other) => other !== path && isInside(other, path))) continue;
    // lstat: the paths are resolved already, so a symlink here was put in place since; covering the link itself fails closed.
    const info = await lstat(path).catch((error: NodeJS.ErrnoException) => {
      if (error.code === 'ENOENT' || error.code === 'ENOTDIR') return undefined;
      throw error;
    });
    if (info) found.push({ path, kind: info.isDirectory() ? 'directory' : 'file' });
  }
  return found;
}
