import { isInside } from '../../src/sandbox/index.ts';

// Shared with the MCP sandbox, so they live in src/sandbox/.
export { isInside, realExisting } from '../../src/sandbox/index.ts';

/**
 * The name of agentbus's state folder in a project folder (`agentbus up`'s `.agentbus/`: the embedded bus's store,
 * its token, `stack.json`). Every workspace hides its own `<root>/.agentbus` from the built-in tools.
 */
export const STATE_DIRECTORY_NAME = '.agentbus';

/** True when `path` is one of `hidden` or lies inside one (all absolute, compared as written). */
export function isHidden(path: string, hidden: readonly string[]): boolean {
  return hidden.some((entry) => isInside(entry, path));
}
