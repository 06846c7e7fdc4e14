import { stat } from 'node:fs/promises';
import { resolve } from 'node:path';
import { pathToFileURL } from 'node:url';
import { isToolDefinition } from '../src/tool-sdk/index.ts';
import type { AnyToolDefinition } from '../src/tool-sdk/index.ts';
import { UsageError } from './context.ts';

/** A module that failed while it was being imported (a syntax error, a throw at its top level). */
export class ToolModuleLoadError extends Error {
  readonly file: string;
  constructor(file: string, cause: unknown) {
    super(`could not load ${file}: ${cause instanceof Error ? cause.message : String(cause)}`, { cause });
    this.name = 'ToolModuleLoadError';
    this.file = file;
  }
}

/**
 * The tool definitions among a module's exports: the default export and every named export that is a tool
 * definition or an array holding some, in export order. One definition exported under two names counts once;
 * two different definitions with one name are a usage error, as is a module with none.
 */
export function toolsOfModule(exports: Readonly<Record<string, unknown>>, file: string): AnyToolDefinition[] {
  const found = new Map<string, { tool: AnyToolDefinition; exportName: string }>();
  const names = ['default', ...Object.keys(exports).filter((name) => name !== 'default')];
  for (const exportName of names) {
    const value = exports[exportName];
    const candidates = Array.isArray(value) ? value : [value];
    for (const candidate of candidates) {
      if (!isToolDefinition(candidate)) continue;
      const seen = found.get(candidate.name);
      if (seen && seen.tool !== candidate) {
        throw new UsageError(`${file} defines the tool ${candidate.name} twice (exports ${seen.exportName} and ${exportName}); tool names must be unique`);
      }
      if (!seen) found.set(candidate.name, { tool: candidate, exportName });
    }
  }
  if (found.size === 0) {
    throw new UsageError(`${file} exports no tools: export defineTool(...) results, or an array of them, as default or named exports`);
  }
  return [...found.values()].map(({ tool }) => tool);
}

/**
 * Imports a module of tools (`.ts` works: the `agentbus` binary runs under tsx) and returns its tools, see
 * {@link toolsOfModule}. A missing file is a usage error; a module that throws while loading is a
 * {@link ToolModuleLoadError}.
 */
export async function loadToolModule(path: string, cwd: string): Promise<{ file: string; tools: AnyToolDefinition[] }> {
  const file = resolve(cwd, path);
  const info = await stat(file).catch(() => undefined);
  if (!info) throw new UsageError(`no module ${JSON.stringify(path)} (looked for ${file})`);
  if (!info.isFile()) throw new UsageError(`${path} is not a file`);
  let exports: Record<string, unknown>;
  try {
    exports = (await import(pathToFileURL(file).href)) as Record<string, unknown>;
  } catch (error) {
    throw new ToolModuleLoadError(path, error);
  }
  return { file, tools: toolsOfModule(exports, path) };
}
