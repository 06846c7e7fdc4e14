import { constants } from 'node:fs';
import { open } from 'node:fs/promises';
import type { FileHandle } from 'node:fs/promises';
import type { Stats } from 'node:fs';
import { ErrorCode, ToolError } from '../../src/errors.ts';

/** An open regular file and what `fstat` said of it. */
export interface OpenRegularFile {
  readonly handle: FileHandle;
  readonly info: Stats;
}

/** What a path is, for a message, when it is not a regular file. */
function kindOf(info: Stats): string {
  if (info.isDirectory()) return 'a directory';
  if (info.isFIFO()) return 'a named pipe (FIFO)';
  if (info.isSocket()) return 'a socket';
  if (info.isCharacterDevice() || info.isBlockDevice()) return 'a device';
  return 'a special file';
}

/**
 * Opens `file` for reading without blocking (`O_NONBLOCK`: opening a FIFO with no writer would hold a libuv pool
 * thread for ever, and with it every later fs call of the worker), checks the handle with `fstat` and returns it only
 * when it is a regular file, so the read goes to what was checked (no stat/open race). Anything else is closed and
 * refused with a {@link ToolError} `invalid_arguments` naming `shown` and what it is; a missing file is `not_found`.
 * The caller closes the handle.
 *
 * @example
 * const { handle, info } = await openRegularFile('/srv/ws/acme/a.txt', 'a.txt');
 * try { return await handle.readFile(); } finally { await handle.close(); }
 */
export async function openRegularFile(file: string, shown: string): Promise<OpenRegularFile> {
  const handle = await open(file, constants.O_RDONLY | constants.O_NONBLOCK).catch((error: NodeJS.ErrnoException) => {
    if (error.code === 'ENOENT') throw new ToolError(ErrorCode.notFound, `no file ${JSON.stringify(shown)} in the workspace`);
    throw error;
  });
  try {
    const info = await handle.stat();
    if (!info.isFile()) {
      throw new ToolError(ErrorCode.invalidArguments, `${shown} is ${kindOf(info)}, not a regular file; only regular files can be read or replaced`);
    }
    return { handle, info };
  } catch (error) {
    await handle.close();
    throw error;
  }
}
