import { lstat, readdir } from 'node:fs/promises';
import { join } from 'node:path';
import { z } from 'zod';
import { ErrorCode, ToolError } from '../../src/errors.ts';
import { SafetyTier } from '../../src/protocol/index.ts';
import { defineTool } from '../../src/tool-sdk/index.ts';
import type { ToolDefinition } from '../../src/tool-sdk/index.ts';
import { isHidden } from './hidden-paths.ts';
import type { Workspaces } from './workspace.ts';

/** Most entries list_dir returns. */
export const LIST_DIR_MAX_ENTRIES = 1000;

/** One entry of a directory listing. */
export interface DirectoryEntry {
  readonly name: string;
  readonly type: 'file' | 'directory' | 'symlink' | 'other';
  /** Size in bytes (of the link itself for a symlink). */
  readonly size: number;
}

/** The output of list_dir. */
export interface DirectoryListing {
  readonly path: string;
  readonly entries: DirectoryEntry[];
  /** Set when the directory had more entries than were returned. */
  readonly truncated?: { readonly total: number };
}

const parameters = z.strictObject({
  path: z.string().default('.').describe('Directory path relative to the workspace; `.` for the workspace itself'),
});

function typeOf(entry: { isFile(): boolean; isDirectory(): boolean; isSymbolicLink(): boolean }): DirectoryEntry['type'] {
  if (entry.isSymbolicLink()) return 'symlink';
  if (entry.isDirectory()) return 'directory';
  if (entry.isFile()) return 'file';
  return 'other';
}

/**
 * `list_dir`: the entries of a workspace directory with their type and size, sorted by name; hidden paths (the
 * stack's `.agentbus`) are left out.
 *
 * @example
 * await createListDirTool(workspace).execute({ path: 'src' }, context); // { path: 'src', entries: [...] }
 */
export function createListDirTool(workspaces: Workspaces): ToolDefinition<typeof parameters> {
  return defineTool({
    name: 'list_dir',
    description: 'List a directory of the workspace: each entry with its type (file, directory, symlink, other) and size in bytes.',
    parameters,
    tier: SafetyTier.readOnly,
    timeoutMs: 10_000,
    idempotent: true,
    async execute({ path }, { signal, tenant }): Promise<DirectoryListing> {
      const workspace = await workspaces.forTenant(tenant, { signal });
      const directory = await workspace.resolve(path, { signal });
      const hidden = await workspace.hiddenPaths({ signal });
      const listed = await readdir(directory).catch((error: NodeJS.ErrnoException) => {
        if (error.code === 'ENOENT') throw new ToolError(ErrorCode.notFound, `no directory ${JSON.stringify(path)} in the workspace`);
        if (error.code === 'ENOTDIR') throw new ToolError(ErrorCode.invalidArguments, `${path} is a file; use read_file`);
        throw error;
      });
      // Hidden entries (the stack's `.agentbus`) are left out as if they were not there, from the count too.
      const names = listed.filter((name) => !isHidden(join(directory, name), hidden)).sort();
      const entries: DirectoryEntry[] = [];
      for (const name of names.slice(0, LIST_DIR_MAX_ENTRIES)) {
        signal.throwIfAborted();
        try {
          const info = await lstat(join(directory, name));
          entries.push({ name, type: typeOf(info), size: info.size });
        } catch (error) {
          // An entry removed between readdir and lstat is simply no longer there.
          if ((error as NodeJS.ErrnoException).code !== 'ENOENT') throw error;
        }
      }
      const listing = { path: workspace.display(directory), entries };
      return names.length > LIST_DIR_MAX_ENTRIES ? { ...listing, truncated: { total: names.length } } : listing;
    },
  });
}
