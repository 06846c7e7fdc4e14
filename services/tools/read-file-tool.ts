import { z } from 'zod';
import { ErrorCode, ToolError } from '../../src/errors.ts';
import { SafetyTier } from '../../src/protocol/index.ts';
import { defineTool } from '../../src/tool-sdk/index.ts';
import type { ToolDefinition } from '../../src/tool-sdk/index.ts';
import { openRegularFile } from './regular-file.ts';
import type { Workspaces } from './workspace.ts';

/** Largest file read_file opens at all. */
export const READ_FILE_MAX_BYTES = 8 * 1024 * 1024;
/** Most text read_file returns in one call; longer output is cut with a note. */
export const READ_FILE_MAX_OUTPUT = 100_000;
/** Lines returned when no limit is given. */
export const READ_FILE_DEFAULT_LINES = 2000;

const parameters = z.strictObject({
  path: z.string().min(1).describe('File path relative to the workspace'),
  offset: z.int().min(0).max(100_000_000).optional().describe('First line to return, counting from 0'),
  limit: z.int().min(1).max(100_000).optional().describe(`Most lines to return (default ${READ_FILE_DEFAULT_LINES})`),
});

/**
 * `read_file`: the text of a file in the workspace, by lines, with a note when more remains.
 *
 * @example
 * createReadFileTool(workspace).execute({ path: 'README.md', offset: 0, limit: 50 }, context);
 */
export function createReadFileTool(workspaces: Workspaces): ToolDefinition<typeof parameters> {
  return defineTool({
    name: 'read_file',
    description:
      'Read a text file from the workspace. Returns up to `limit` lines starting at line `offset` (0-based); ' +
      'a note at the end says when the file has more.',
    parameters,
    tier: SafetyTier.readOnly,
    timeoutMs: 10_000,
    idempotent: true,
    async execute({ path, offset = 0, limit = READ_FILE_DEFAULT_LINES }, { signal, tenant }) {
      const workspace = await workspaces.forTenant(tenant, { signal });
      const file = await workspace.resolve(path, { signal });
      // Not stat-then-readFile: a FIFO (a tenant can make one with run_command) would block the open for ever.
      const { handle, info } = await openRegularFile(file, path);
      let bytes: Buffer;
      try {
        if (info.size > READ_FILE_MAX_BYTES) {
          throw new ToolError(ErrorCode.invalidArguments, `${path} has ${info.size} bytes; read_file reads files up to ${READ_FILE_MAX_BYTES} bytes`);
        }
        bytes = await handle.readFile({ signal });
      } finally {
        await handle.close();
      }
      if (bytes.subarray(0, 8192).includes(0)) return `[${path} is a binary file of ${bytes.byteLength} bytes]`;
      const lines = bytes.toString('utf8').split('\n');
      if (lines.length > 1 && lines[lines.length - 1] === '') lines.pop();
      const total = lines.length;
      if (offset >= total && total > 0) return `[${path} has ${total} lines; offset ${offset} is past the end]`;
      let text = '';
      let next = offset;
      const end = Math.min(total, offset + limit);
      while (next < end) {
        const line = lines[next]!;
        if (text.length + line.length + 1 > READ_FILE_MAX_OUTPUT && next > offset) break;
        text += next + 1 < total ? `${line}\n` : line;
        next += 1;
      }
      if (text.length > READ_FILE_MAX_OUTPUT) text = text.slice(0, READ_FILE_MAX_OUTPUT);
      if (next < total) {
        text += `${text.endsWith('\n') ? '' : '\n'}[truncated: showed lines ${offset}-${next - 1} of ${total}; call read_file with offset ${next} to read on]`;
      }
      return text;
    },
  });
}
