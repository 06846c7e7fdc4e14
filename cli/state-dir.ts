import { chmod, mkdir, readFile, rename, rm, writeFile } from 'node:fs/promises';
import { join, resolve } from 'node:path';
import { STATE_DIRECTORY_NAME } from '../src/sandbox/index.ts';

/**
 * What `agentbus up` leaves in `.agentbus/stack.json` (mode 0600, in a folder only its owner may enter) so that
 * `ask`, `tail` and the other commands find its bus and can log in to it.
 */
export interface StackFile {
  readonly url: string;
  /** Pid of the `agentbus up` process. */
  readonly pid: number;
  readonly startedAt: string;
  /** The embedded server's token (`NATS_TOKEN`); absent in a file of an older `agentbus up`, whose server had none. */
  readonly token?: string;
}

/** Mode of the state folder: its owner alone may list or enter it (the bus's token and data are inside). */
export const STATE_DIR_MODE = 0o700;
/** Mode of a file holding a secret: its owner alone may read it. */
export const SECRET_FILE_MODE = 0o600;

/**
 * Creates `dir` (and its parents) when missing and makes it its owner's alone, also when an older agentbus made it
 * readable by everyone.
 */
export async function makePrivateDir(dir: string): Promise<void> {
  await mkdir(dir, { recursive: true, mode: STATE_DIR_MODE });
  try {
    await chmod(dir, STATE_DIR_MODE);
  } catch (error) {
    const reason = (error as NodeJS.ErrnoException).code ?? (error as Error).message;
    throw new Error(`cannot make ${dir} readable by its owner alone (${reason}); it holds the bus's token and data: fix its owner or remove it`, { cause: error });
  }
}

/** The project's state folder: `.agentbus/` in the working directory. */
export function stateDir(cwd: string = process.cwd()): string {
  return resolve(cwd, STATE_DIRECTORY_NAME);
}

const stackPath = (dir: string) => join(dir, 'stack.json');

/** Records the running stack: written whole to a file of mode 0600 and moved in place, so it is never read half-written or readable by others. */
export async function writeStackFile(dir: string, stack: StackFile): Promise<void> {
  await makePrivateDir(dir);
  const partial = `${stackPath(dir)}.${process.pid}.tmp`;
  await writeFile(partial, `${JSON.stringify(stack, null, 2)}\n`, { mode: SECRET_FILE_MODE });
  await chmod(partial, SECRET_FILE_MODE);
  await rename(partial, stackPath(dir));
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
    const token = typeof value.token === 'string' && value.token !== '' ? { token: value.token } : {};
    return { url: value.url, pid: value.pid, startedAt: String(value.startedAt ?? ''), ...token };
  } catch {
    return undefined;
  }
}
