import type { AnyToolDefinition } from '../../src/tool-sdk/index.ts';
import { createListDirTool } from './list-dir-tool.ts';
import { createReadFileTool } from './read-file-tool.ts';
import type { Workspace } from './workspace.ts';
import { createWriteFileTool } from './write-file-tool.ts';

/** The built-in tools, all rooted at one workspace: `read_file`, `list_dir`, `write_file`. */
export function createBuiltInTools(workspace: Workspace): AnyToolDefinition[] {
  return [createReadFileTool(workspace), createListDirTool(workspace), createWriteFileTool(workspace)];
}
