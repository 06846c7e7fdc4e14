import { randomUUID } from 'node:crypto';
import { mkdir, rename, rm, writeFile } from 'node:fs/promises';
import { basename, dirname, join } from 'node:path';
import { z } from 'zod';
import { ErrorCode, ToolError } from '../../src/errors.ts';
import { SafetyTier } from '../../src/protocol/index.ts';
import { defineTool } from '../../src/tool-sdk/index.ts';
import type { ToolDefinition } from '../../src/tool-sdk/index.ts';
import { openRegularFile } from './regular-file.ts';
import type { Workspaces } from './workspace.ts';

/** Largest content write_file accepts. */
export const WRITE_FILE_MAX_BYTES = 4 * 1024 * 1024;

/** The output of write_file. */
export interface WriteResult {
  readonly path: string;
  readonly bytes: number;
  /** False when the file already had exactly this content: a retried call changes nothing. */
  readonly changed: boolean;
}

const parameters = z.strictObject({
  path: z.string().min(1).describe('File path relative to the workspace; missing directories are created'),
  content: z.string().max(WRITE_FILE_MAX_BYTES).describe('The whole new content of the file'),
});

/** The file's content now, or undefined when there is none; refuses a directory, FIFO, socket or device (see openRegularFile). */
async function currentContent(file: string, shown: string, signal: AbortSignal): Promise<Buffer | undefined> {
  let opened;
  try {
    opened = await openRegularFile(file, shown);
  } catch (error) {
    if (error instanceof ToolError && error.code === ErrorCode.notFound) return undefined;
    const code = (error as NodeJS.ErrnoException).code;
    if (code === 'ENOENT' || code === 'ENOTDIR') return undefined;
    throw error;
  }
  try {
    // Larger than any content write_file accepts: it differs, no need to read it.
    if (opened.info.size > WRITE_FILE_MAX_BYTES) return Buffer.alloc(0);
    return await opened.handle.readFile({ signal });
  } finally {
    await opened.handle.close();
  }
}

/**
 * `write_file`: replaces a workspace file's content, atomically (temp file and rename). Idempotent by
 * content: writing what is already there changes nothing and says so.
 *
 * @example
 * await createWriteFileTool(workspace).execute({ path: 'notes/todo.md', content: '- ship it\n' }, context);
 */
export function createWriteFileTool(workspaces: Workspaces): ToolDefinition<typeof parameters> {
  return defineTool({
    name: 'write_file',
    description: 'Write a text file in the workspace, replacing its whole content; creates missing directories.',
    parameters,
    tier: SafetyTier.sideEffecting,
    timeoutMs: 10_000,
    idempotent: true,
    async execute({ path, content }, { signal, tenant }): Promise<WriteResult> {
      const workspace = await workspaces.forTenant(tenant, { signal });
      const file = await workspace.resolve(path, { signal });
      const bytes = Buffer.from(content, 'utf8');
      const shown = workspace.display(file);
      const existing = await currentContent(file, shown, signal);
      if (existing?.equals(bytes)) return { path: shown, bytes: bytes.byteLength, changed: false };
      await mkdir(dirname(file), { recursive: true });
      signal.throwIfAborted();
      const temporary = join(dirname(file), `.${basename(file)}.${randomUUID()}.tmp`);
      try {
        await writeFile(temporary, bytes, { signal });
        await rename(temporary, file);
      } catch (error) {
        await rm(temporary, { force: true });
        throw error;
      }
      return { path: shown, bytes: bytes.byteLength, changed: true };
    },
  });
}
