import { mkdir, readFile, rm, writeFile } from 'node:fs/promises';
import { join, resolve } from 'node:path';

/** What `agentbus up` leaves in `.agentbus/stack.json` so `ask` and `tail` find its bus. */
export interface StackFile {
  readonly url: string;
  /** Pid of the `agentbus up` process. */
  readonly pid: number;
  readonly startedAt: string;
}

/** The project's state folder: `.agentbus/` in the working directory. */
export function stateDir(cwd: string = process.cwd()): string {
  return resolve(cwd, '.agentbus');
}

const stackPath = (dir: string) => join(dir, 'stack.json');

/** Records the running stack. */
export async function writeStackFile(dir: string, stack: StackFile): Promise<void> {
  await mkdir(dir, { recursive: true });
  await writeFile(stackPath(dir), `${JSON.stringify(stack, null, 2)}\n`);
}

/** Removes the record, if it is still ours. */
export async function removeStackFile(dir: string, pid: number): Promise<void> {
  const current = await readStackFile(dir);
  if (current?.pid === pid) await rm(stackPath(dir), { force: true });
}

function alive(pid: number): boolean {
  try {
    process.kill(pid, 0);
    return true;
  } catch (error) {
    return (error as NodeJS.ErrnoException).code === 'EPERM';
  }
}

/** The stack `agentbus up` runs from this folder, or undefined when none runs (a stale file is ignored). */
export async function readStackFile(dir: string): Promise<StackFile | undefined> {
  let text: string;
  try {
    text = await readFile(stackPath(dir), 'utf8');
  } catch {
    return undefined;
  }
  try {
    // A local file of our own, not bus data: the codec rule does not apply here.
    const value = JSON.parse(text) as Partial<StackFile>;
    if (typeof value.url !== 'string' || typeof value.pid !== 'number' || !alive(value.pid)) return undefined;
    return { url: value.url, pid: value.pid, startedAt: String(value.startedAt ?? '') };
  } catch {
    return undefined;
  }
}
