import { readdir, stat } from 'node:fs/promises';
import { join } from 'node:path';
import { setImmediate as yieldToLoop } from 'node:timers/promises';
import { z } from 'zod';
import { ErrorCode, ToolError } from '../../src/errors.ts';
import { SafetyTier } from '../../src/protocol/index.ts';
import { defineTool } from '../../src/tool-sdk/index.ts';
import type { ToolDefinition } from '../../src/tool-sdk/index.ts';
import { compileGlob } from './glob.ts';
import type { GlobMatcher } from './glob.ts';
import { isHidden } from './hidden-paths.ts';
import { createLineScanner } from './line-scanner.ts';
import type { LineScanner } from './line-scanner.ts';
import { openRegularFile } from './regular-file.ts';
import type { Workspace, Workspaces } from './workspace.ts';

/** Matches returned when no `maxResults` is given. */
export const SEARCH_TEXT_DEFAULT_RESULTS = 100;
/** Most matches one call returns. */
export const SEARCH_TEXT_MAX_RESULTS = 1000;
/** A matching line longer than this is cut, with `…`. */
export const SEARCH_TEXT_MAX_LINE = 300;
/** Files larger than this are skipped. */
export const SEARCH_TEXT_MAX_FILE_BYTES = 4 * 1024 * 1024;
/** Longest the search of one file's lines (in a thread of its own) may take before the call fails. */
export const SEARCH_TEXT_REGEX_BUDGET_MS = 5_000;
/** Longest the walk holds the event loop before it lets other calls run (matching many paths to a glob). */
export const SEARCH_TEXT_LOOP_SLICE_MS = 10;
/** Most files one call reads; the search stops there and says so. */
export const SEARCH_TEXT_MAX_FILES = 20_000;
/** Directories never descended into. */
export const SEARCH_TEXT_SKIPPED_DIRECTORIES: ReadonlySet<string> = new Set(['node_modules', '.git']);

/** One matching line. */
export interface TextMatch {
  /** Relative to the workspace. */
  readonly path: string;
  /** 1-based. */
  readonly line: number;
  readonly text: string;
}

/** The output of search_text. */
export interface TextSearch {
  readonly matches: TextMatch[];
  readonly filesSearched: number;
  /** Set when the search stopped early (`maxResults` or the file limit); says how to narrow it. */
  readonly truncated?: string;
}

const parameters = z.strictObject({
  pattern: z.string().min(1).max(1000).describe('Text to find; a JavaScript regular expression when `regex` is true'),
  path: z.string().default('.').describe('File or directory to search, relative to the workspace; default the whole workspace'),
  glob: z.string().min(1).max(200).optional().describe("Only files matching this glob, e.g. '*.ts' (file name) or 'src/**/*.md' (path)"),
  regex: z.boolean().default(false).describe('Treat `pattern` as a regular expression'),
  caseSensitive: z.boolean().default(true).describe('Match case exactly (default true)'),
  maxResults: z.int().min(1).max(SEARCH_TEXT_MAX_RESULTS).default(SEARCH_TEXT_DEFAULT_RESULTS).describe('Most matching lines to return'),
});

function matcherOf(pattern: string, regex: boolean, caseSensitive: boolean): RegExp {
  const source = regex ? pattern : pattern.replace(/[.*+?^${}()|[\]\\]/g, '\\$&');
  try {
    return new RegExp(source, caseSensitive ? 'u' : 'iu');
  } catch (error) {
    throw new ToolError(ErrorCode.invalidArguments, `pattern is not a valid regular expression: ${(error as Error).message}`, { cause: error });
  }
}

function globOf(glob: string | undefined): ((path: string) => boolean) | undefined {
  if (glob === undefined) return undefined;
  let matcher: GlobMatcher;
  try {
    // Linear in the path whatever the glob: a glob compiled to a backtracking RegExp (`**/**?**?…#`) held the
    // worker's loop for minutes on one path.
    matcher = compileGlob(glob);
  } catch (error) {
    throw new ToolError(ErrorCode.invalidArguments, `glob is not valid: ${(error as Error).message}`, { cause: error });
  }
  // As ripgrep: a glob without `/` matches the file name, one with `/` the path.
  return glob.includes('/') ? (path) => matcher.test(path) : (path) => matcher.test(path.slice(path.lastIndexOf('/') + 1));
}

/**
 * The files under `start` (itself when a file), depth first in name order, without symlinks, skipped directories or
 * what lies in `hidden` (resolved paths, as `start` is).
 */
async function* filesUnder(start: string, shown: string, hidden: readonly string[], signal: AbortSignal): AsyncGenerator<string> {
  const info = await stat(start).catch((error: NodeJS.ErrnoException) => {
    if (error.code === 'ENOENT') throw new ToolError(ErrorCode.notFound, `no file or directory ${JSON.stringify(shown)} in the workspace`);
    throw error;
  });
  if (info.isFile()) {
    yield start;
    return;
  }
  const stack = [start];
  while (stack.length > 0) {
    signal.throwIfAborted();
    const directory = stack.pop()!;
    const entries = await readdir(directory, { withFileTypes: true }).catch((error: NodeJS.ErrnoException) => {
      // A directory removed or unreadable mid-walk is skipped, not fatal.
      if (error.code === 'ENOENT' || error.code === 'EACCES' || error.code === 'ENOTDIR') return [];
      throw error;
    });
    entries.sort((a, b) => (a.name < b.name ? -1 : a.name > b.name ? 1 : 0));
    const subdirectories: string[] = [];
    for (const entry of entries) {
      if (isHidden(join(directory, entry.name), hidden)) continue;
      // Symlinks are not followed: they could lead out of the workspace or round in a cycle.
      if (entry.isDirectory()) {
        if (!SEARCH_TEXT_SKIPPED_DIRECTORIES.has(entry.name)) subdirectories.push(join(directory, entry.name));
      } else if (entry.isFile()) {
        yield join(directory, entry.name);
      }
    }
    for (const subdirectory of subdirectories.reverse()) stack.push(subdirectory);
  }
}

/** Walks the files under `path` (filtered by `glob`) and collects the lines `scanner` finds, within the bounds. */
async function searchFiles(
  workspace: Workspace,
  { path, glob, maxResults }: { path: string; glob: string | undefined; maxResults: number },
  scanner: LineScanner,
  signal: AbortSignal,
): Promise<TextSearch> {
  const included = globOf(glob);
  const start = await workspace.resolve(path, { signal });
  const hidden = await workspace.hiddenPaths({ signal });
  const matches: TextMatch[] = [];
  let filesSearched = 0;
  let sliceStarted = performance.now();
  for await (const file of filesUnder(start, path, hidden, signal)) {
    // Files the glob leaves out cost no I/O, so a directory of many of them would run as one long task.
    if (performance.now() - sliceStarted > SEARCH_TEXT_LOOP_SLICE_MS) {
      await yieldToLoop(undefined, { signal });
      sliceStarted = performance.now();
    }
    signal.throwIfAborted();
    const shown = workspace.display(file);
    if (included && !included(shown)) continue;
    if (filesSearched >= SEARCH_TEXT_MAX_FILES) {
      return { matches, filesSearched, truncated: `stopped after ${SEARCH_TEXT_MAX_FILES} files; narrow the search with path or glob` };
    }
    // Opened without blocking and checked on the handle: a FIFO put here since the walk saw a file is skipped, not waited on.
    const opened = await openRegularFile(file, shown).catch(() => undefined);
    if (!opened) continue;
    let bytes: Buffer | undefined;
    try {
      if (opened.info.size > SEARCH_TEXT_MAX_FILE_BYTES) continue;
      bytes = await opened.handle.readFile({ signal }).catch((error: NodeJS.ErrnoException) => {
        if (error.name === 'AbortError') throw error;
        return undefined;
      });
    } finally {
      await opened.handle.close();
    }
    if (!bytes || bytes.subarray(0, 8192).includes(0)) continue;
    filesSearched += 1;
    // One more than still fits, to know whether the search stops short.
    for (const found of await scanner.scan(bytes, maxResults - matches.length + 1, signal)) {
      if (matches.length >= maxResults) {
        return { matches, filesSearched, truncated: `stopped at ${maxResults} matches; narrow the pattern, path or glob, or raise maxResults (up to ${SEARCH_TEXT_MAX_RESULTS})` };
      }
      matches.push({ path: shown, line: found.line, text: found.text });
    }
  }
  return { matches, filesSearched };
}

/**
 * `search_text`: lines of workspace files that contain a text or match a regular expression, like `rg`, in pure
 * Node. Skips `node_modules`, `.git`, hidden paths (the stack's `.agentbus`), symlinks, binary files (a NUL byte in
 * the first 8 KiB) and files over 4 MiB.
 *
 * @example
 * await createSearchTextTool(workspace).execute({ pattern: 'TODO', glob: '*.ts' }, context);
 * // { matches: [{ path: 'src/a.ts', line: 3, text: '// TODO: …' }], filesSearched: 12 }
 */
export function createSearchTextTool(workspaces: Workspaces): ToolDefinition<typeof parameters> {
  return defineTool({
    name: 'search_text',
    description:
      'Search the text files of the workspace for a string (or a regular expression with regex: true), like ripgrep. ' +
      'Returns matching lines as { path, line, text }; skips node_modules, .git and binary files.',
    parameters,
    tier: SafetyTier.readOnly,
    timeoutMs: 30_000,
    idempotent: true,
    async execute({ pattern, path, glob, regex, caseSensitive, maxResults }, { signal, tenant }): Promise<TextSearch> {
      const matcher = matcherOf(pattern, regex, caseSensitive);
      // Lines are matched in a thread ended past its budget or the call's deadline, plain text too: a model's
      // expression can backtrack without end, and even a literal can hold a loop for seconds (see line-scanner.ts).
      const scanner = createLineScanner({ source: matcher.source, flags: matcher.flags, budgetMs: SEARCH_TEXT_REGEX_BUDGET_MS, maxLine: SEARCH_TEXT_MAX_LINE, regex });
      try {
        return await searchFiles(await workspaces.forTenant(tenant, { signal }), { path, glob, maxResults }, scanner, signal);
      } finally {
        await scanner.close();
      }
    },
  });
}
