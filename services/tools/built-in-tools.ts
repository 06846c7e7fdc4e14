import type { AnyToolDefinition } from '../../src/tool-sdk/index.ts';
import { createCurrentTimeTool } from './current-time-tool.ts';
import { createListDirTool } from './list-dir-tool.ts';
import { createReadFileTool } from './read-file-tool.ts';
import { createRunCommandTool } from './run-command-tool.ts';
import { createSearchTextTool } from './search-text-tool.ts';
import type { Workspace } from './workspace.ts';
import { createWriteFileTool } from './write-file-tool.ts';

/** Options of {@link createBuiltInTools}. */
export interface BuiltInToolsOptions {
  /** The clock of `current_time`; default `Date.now`. */
  readonly now?: () => number;
}

/**
 * The built-in tools, all rooted at one workspace: `read_file`, `list_dir`, `search_text`, `write_file`,
 * `current_time` and `run_command` (privileged: the runtime asks for approval).
 */
export function createBuiltInTools(workspace: Workspace, options: BuiltInToolsOptions = {}): AnyToolDefinition[] {
  return [
    createReadFileTool(workspace),
    createListDirTool(workspace),
    createSearchTextTool(workspace),
    createWriteFileTool(workspace),
    createCurrentTimeTool(options.now),
    createRunCommandTool(workspace),
  ];
}
