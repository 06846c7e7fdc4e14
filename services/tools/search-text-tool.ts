import { readFile, readdir, stat } from 'node:fs/promises';
import { join } from 'node:path';
import { z } from 'zod';
import { ErrorCode, ToolError } from '../../src/errors.ts';
import { SafetyTier } from '../../src/protocol/index.ts';
import { defineTool } from '../../src/tool-sdk/index.ts';
import type { ToolDefinition } from '../../src/tool-sdk/index.ts';
import { globToRegExp } from './glob.ts';
import { createLineMatcher } from './regex-lines.ts';
import type { LineMatcher } from './regex-lines.ts';
import type { Workspace, Workspaces } from './workspace.ts';

/** Matches returned when no `maxResults` is given. */
export const SEARCH_TEXT_DEFAULT_RESULTS = 100;
/** Most matches one call returns. */
export const SEARCH_TEXT_MAX_RESULTS = 1000;
/** A matching line longer than this is cut, with `…`. */
export const SEARCH_TEXT_MAX_LINE = 300;
/** Files larger than this are skipped. */
export const SEARCH_TEXT_MAX_FILE_BYTES = 4 * 1024 * 1024;
/** Longest a regular expression may run over one file's lines (in its own thread) before the call fails. */
export const SEARCH_TEXT_REGEX_BUDGET_MS = 5_000;
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
  let expression: RegExp;
  try {
    expression = globToRegExp(glob);
  } catch (error) {
    throw new ToolError(ErrorCode.invalidArguments, `glob is not valid: ${(error as Error).message}`, { cause: error });
  }
  // As ripgrep: a glob without `/` matches the file name, one with `/` the path.
  return glob.includes('/') ? (path) => expression.test(path) : (path) => expression.test(path.slice(path.lastIndexOf('/') + 1));
}

/** The files under `start` (itself when a file), depth first in name order, without symlinks or skipped directories. */
async function* filesUnder(start: string, shown: string, signal: AbortSignal): AsyncGenerator<string> {
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

function cut(line: string): string {
  const trimmed = line.endsWith('\r') ? line.slice(0, -1) : line;
  return trimmed.length > SEARCH_TEXT_MAX_LINE ? `${trimmed.slice(0, SEARCH_TEXT_MAX_LINE)}…` : trimmed;
}

/** Walks the files under `path` (filtered by `glob`) and collects the lines `matchLines` picks, within the bounds. */
async function searchFiles(
  workspace: Workspace,
  { path, glob, maxResults }: { path: string; glob: string | undefined; maxResults: number },
  matchLines: (lines: readonly string[]) => Promise<number[]>,
  signal: AbortSignal,
): Promise<TextSearch> {
  const included = globOf(glob);
  const start = await workspace.resolve(path, { signal });
  const matches: TextMatch[] = [];
  let filesSearched = 0;
  for await (const file of filesUnder(start, path, signal)) {
    signal.throwIfAborted();
    const shown = workspace.display(file);
    if (included && !included(shown)) continue;
    if (filesSearched >= SEARCH_TEXT_MAX_FILES) {
      return { matches, filesSearched, truncated: `stopped after ${SEARCH_TEXT_MAX_FILES} files; narrow the search with path or glob` };
    }
    const info = await stat(file).catch(() => undefined);
    if (!info || info.size > SEARCH_TEXT_MAX_FILE_BYTES) continue;
    const bytes = await readFile(file, { signal }).catch((error: NodeJS.ErrnoException) => {
      if (error.name === 'AbortError') throw error;
      return undefined;
    });
    if (!bytes || bytes.subarray(0, 8192).includes(0)) continue;
    filesSearched += 1;
    const lines = bytes.toString('utf8').split('\n');
    for (const index of await matchLines(lines)) {
      if (matches.length >= maxResults) {
        return { matches, filesSearched, truncated: `stopped at ${maxResults} matches; narrow the pattern, path or glob, or raise maxResults (up to ${SEARCH_TEXT_MAX_RESULTS})` };
      }
      matches.push({ path: shown, line: index + 1, text: cut(lines[index]!) });
    }
  }
  return { matches, filesSearched };
}

/**
 * `search_text`: lines of workspace files that contain a text or match a regular expression, like `rg`, in pure
 * Node. Skips `node_modules`, `.git`, symlinks, binary files (a NUL byte in the first 8 KiB) and files over 4 MiB.
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
      // Plain text is matched here (an escaped literal is linear); a model's regular expression in a thread.
      const threaded = regex ? createLineMatcher(matcher.source, matcher.flags, SEARCH_TEXT_REGEX_BUDGET_MS) : undefined;
      const matchLines = threaded
        ? (lines: readonly string[]) => threaded.match(lines, signal)
        : async (lines: readonly string[]) => lines.flatMap((line, index) => (matcher.test(line) ? [index] : []));
      try {
        return await searchFiles(await workspaces.forTenant(tenant, { signal }), { path, glob, maxResults }, matchLines, signal);
      } finally {
        await threaded?.close();
      }
    },
  });
}
