import type { AnyToolDefinition } from '../../src/tool-sdk/index.ts';
import { createCurrentTimeTool } from './current-time-tool.ts';
import { createListDirTool } from './list-dir-tool.ts';
import { createReadFileTool } from './read-file-tool.ts';
import { createRunCommandTool } from './run-command-tool.ts';
import { createSearchTextTool } from './search-text-tool.ts';
import type { CommandSandbox } from './sandbox-config.ts';
import type { Workspaces } from './workspace.ts';
import { createWriteFileTool } from './write-file-tool.ts';

/** Options of {@link createBuiltInTools}. */
export interface BuiltInToolsOptions {
  /** The clock of `current_time`; default `Date.now`. */
  readonly now?: () => number;
  /** How `run_command` isolates commands; default bubblewrap without network. */
  readonly sandbox?: CommandSandbox;
}

/**
 * The built-in tools, each call working in its tenant's workspace of `workspaces`: `read_file`, `list_dir`,
 * `search_text`, `write_file`, `current_time` and `run_command` (privileged: the runtime asks for approval; sandboxed).
 */
export function createBuiltInTools(workspace: Workspaces, options: BuiltInToolsOptions = {}): AnyToolDefinition[] {
  return [
    createReadFileTool(workspace),
    createListDirTool(workspace),
    createSearchTextTool(workspace),
    createWriteFileTool(workspace),
    createCurrentTimeTool(options.now),
    createRunCommandTool(workspace, options.sandbox ? { sandbox: options.sandbox } : {}),
  ];
}
