import { isInside } from '../../src/sandbox/index.ts';

// Shared with the MCP sandbox, so they live in src/sandbox/.
export { STATE_DIRECTORY_NAME, isInside, realExisting } from '../../src/sandbox/index.ts';


/** True when `path` is one of `hidden` or lies inside one (all absolute, compared as written). */
export function isHidden(path: string, hidden: readonly string[]): boolean {
  return hidden.some((entry) => isInside(entry, path));
}
