import { randomUUID } from 'node:crypto';
import { mkdir, readFile, rename, rm, writeFile } from 'node:fs/promises';
import { basename, dirname, join } from 'node:path';
import { z } from 'zod';
import { ErrorCode, ToolError } from '../../src/errors.ts';
import { SafetyTier } from '../../src/protocol/index.ts';
import { defineTool } from '../../src/tool-sdk/index.ts';
import type { ToolDefinition } from '../../src/tool-sdk/index.ts';
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

async function currentContent(file: string, signal: AbortSignal): Promise<Buffer | undefined> {
  try {
    return await readFile(file, { signal });
  } catch (error) {
    const code = (error as NodeJS.ErrnoException).code;
    if (code === 'ENOENT') return undefined;
    if (code === 'EISDIR') throw new ToolError(ErrorCode.invalidArguments, `${basename(file)} is a directory`);
    throw error;
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
      const existing = await currentContent(file, signal);
      const shown = workspace.display(file);
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
