import { execFileSync, spawnSync } from 'node:child_process';
import { mkdir, mkdtemp, rm, stat, writeFile } from 'node:fs/promises';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { createReadFileTool } from '../../services/tools/read-file-tool.ts';
import { createSearchTextTool } from '../../services/tools/search-text-tool.ts';
import type { TextSearch } from '../../services/tools/search-text-tool.ts';
import { createWorkspace } from '../../services/tools/workspace.ts';
import { createWriteFileTool } from '../../services/tools/write-file-tool.ts';
import type { ToolCallReply } from '../../src/protocol/index.ts';
import { outputOf, runTool } from '../helpers/run-tool.ts';

// A tenant can make a FIFO in its workspace (run_command ["mkfifo", "p"]). Opening one with no writer blocks a libuv
// pool thread for good; four such opens would wedge every fs call of the tools worker, for every tenant.

let root: string;
const fifo = () => join(root, 'pipes', 'p');

/** Settles within `ms` or says it did not. */
function within<T>(promise: Promise<T>, ms: number): Promise<T | 'blocked'> {
  let timer: NodeJS.Timeout | undefined;
  const late = new Promise<'blocked'>((resolve) => (timer = setTimeout(() => resolve('blocked'), ms)));
  return Promise.race([promise, late]).finally(() => clearTimeout(timer));
}

function errorOf(reply: ToolCallReply | 'blocked'): { code: string; message: string } | 'blocked' | 'ok' {
  if (reply === 'blocked') return 'blocked';
  return reply.ok ? 'ok' : { code: reply.error.code, message: reply.error.message };
}

beforeAll(async () => {
  root = await mkdtemp(join(tmpdir(), 'agentbus-special-'));
  await mkdir(join(root, 'pipes'));
  await writeFile(join(root, 'pipes', 'a.txt'), 'needle in a file\n');
  execFileSync('mkfifo', [fifo()]);
});

afterAll(async () => {
  // Should a read be stuck on the FIFO (the bug), a writer end frees it: O_RDWR on a FIFO never blocks on Linux.
  spawnSync('sh', ['-c', 'exec 3<>"$1"', 'sh', fifo()], { timeout: 5000 });
  await rm(root, { recursive: true, force: true });
});

describe('special files in the workspace', () => {
  it('read_file refuses a FIFO at once, with invalid_arguments', async () => {
    const reply = await within(runTool(createReadFileTool(createWorkspace(root)), { path: 'pipes/p' }), 5000);
    const error = errorOf(reply);
    expect(error).toMatchObject({ code: 'invalid_arguments' });
    expect(error !== 'blocked' && error !== 'ok' && error.message).toContain('named pipe');
  });

  it('parallel read_file calls on a FIFO leave the fs thread pool free for everyone else', async () => {
    const tool = createReadFileTool(createWorkspace(root));
    const replies = await within(Promise.all(Array.from({ length: 8 }, () => runTool(tool, { path: 'pipes/p' }))), 8000);
    expect(replies).not.toBe('blocked');
    expect(await within(stat('/'), 3000)).not.toBe('blocked');
  });

  it('write_file over a FIFO is refused and leaves it a FIFO', async () => {
    const reply = await within(runTool(createWriteFileTool(createWorkspace(root)), { path: 'pipes/p', content: 'x' }), 5000);
    expect(errorOf(reply)).toMatchObject({ code: 'invalid_arguments' });
    expect((await stat(fifo())).isFIFO()).toBe(true);
  });

  it('search_text over a folder holding a FIFO completes and finds the regular file', async () => {
    const reply = await within(runTool(createSearchTextTool(createWorkspace(root)), { pattern: 'needle', path: 'pipes' }), 8000);
    expect(reply).not.toBe('blocked');
    const result = outputOf<TextSearch>(reply as ToolCallReply);
    expect(result.matches).toEqual([{ path: 'pipes/a.txt', line: 1, text: 'needle in a file' }]);
    // Named directly, the FIFO is neither a file nor a directory to walk: nothing to search, and no wait.
    const direct = await within(runTool(createSearchTextTool(createWorkspace(root)), { pattern: 'needle', path: 'pipes/p' }), 8000);
    expect(direct).not.toBe('blocked');
  });
});
