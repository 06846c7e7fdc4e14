import { constants } from 'node:fs';
import { access } from 'node:fs/promises';
import { delimiter, isAbsolute, join, resolve } from 'node:path';

async function executable(path: string): Promise<boolean> {
  try {
    await access(path, constants.X_OK);
    return true;
  } catch {
    return false;
  }
}

/**
 * The absolute path of an executable program: `program` itself when it has a `/` (resolved against the current
 * directory), else the first match on `searchPath` (a `PATH` value). Undefined when there is none.
 *
 * @example
 * await findProgram('bwrap', process.env.PATH); // '/usr/bin/bwrap', or undefined where bubblewrap is not installed
 */
export async function findProgram(program: string, searchPath: string | undefined): Promise<string | undefined> {
  if (program.includes('/')) {
    const path = isAbsolute(program) ? program : resolve(program);
    return (await executable(path)) ? path : undefined;
  }
  for (const directory of (searchPath ?? '').split(delimiter)) {
    if (directory === '') continue;
    const candidate = join(directory, program);
    if (await executable(candidate)) return candidate;
  }
  return undefined;
}
