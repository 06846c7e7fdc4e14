import { realpath } from 'node:fs/promises';
import { dirname, isAbsolute, relative, resolve, sep } from 'node:path';

/**
 * The name of agentbus's state folder in a project folder (`agentbus up`'s `.agentbus/`: the embedded bus's store,
 * its token, `stack.json`). Every workspace hides its own `<root>/.agentbus` from the built-in tools.
 */
export const STATE_DIRECTORY_NAME = '.agentbus';

/** True when `candidate` is `root` or lies inside it (both absolute, compared as written). */
export function isInside(root: string, candidate: string): boolean {
  const rel = relative(root, candidate);
  return rel === '' || (!rel.startsWith(`..${sep}`) && rel !== '..' && !isAbsolute(rel));
}

/** True when `path` is one of `hidden` or lies inside one (all absolute, compared as written). */
export function isHidden(path: string, hidden: readonly string[]): boolean {
  return hidden.some((entry) => isInside(entry, path));
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
