import type { Tool } from '@modelcontextprotocol/sdk/types.js';
import { isToken } from '../protocol/index.ts';
import type { SafetyTier } from '../protocol/index.ts';
import { defineTool, jsonSchemaParameters } from '../tool-sdk/index.ts';
import type { AnyToolDefinition, ToolContext } from '../tool-sdk/index.ts';
import type { ArgumentCheckFactory } from './mcp-arguments.ts';
import { classifyMcpTool } from './mcp-tier.ts';

/** Runs a call of an MCP tool on whatever session to its server is live; the output is the call's output. */
export type McpToolCall = (name: string, args: Record<string, unknown>, context: ToolContext, timeoutMs: number) => Promise<unknown>;

/** An MCP tool that is not served, and why. */
export interface SkippedMcpTool {
  readonly name: string;
  readonly reason: string;
}

/** Options of {@link mcpToolDefinitions}. */
export interface McpToolDefinitionsOptions {
  readonly call: McpToolCall;
  /** The tier a tool is forced to (`--tier`), or undefined to take it from its annotations. */
  readonly tierOf: (name: string) => SafetyTier | undefined;
  /** The timeout of one call of a tool, in milliseconds. */
  readonly timeoutOf: (name: string) => number;
  /** Compiles an input schema into an argument check; without it the server alone checks arguments. */
  readonly checks?: ArgumentCheckFactory;
  /** Put before each tool's name on the bus (`--prefix fs_`: `read_file` served as `fs_read_file`); default none. */
  readonly prefix?: string;
}

/**
 * Tool definitions, as a tool worker serves them, for an MCP server's tools: each under the MCP tool's own name (after
 * `prefix`, when given), its input schema announced as is (`jsonSchema`) and checked before the call, its tier and
 * idempotency from its annotations (see `classifyMcpTool`) unless `tierOf` forces one, and its description (or title,
 * or name). `tierOf`, `timeoutOf` and `call` are given the MCP tool's own name. A tool whose name (with the prefix) is
 * not a bus token (`[A-Za-z0-9_-]{1,64}`), or that can only run as an MCP task, is skipped and said why.
 *
 * @example
 * const { tools, skipped } = mcpToolDefinitions(await session.listTools({}), { call, tierOf: () => undefined, timeoutOf: () => 60_000 });
 */
export function mcpToolDefinitions(tools: readonly Tool[], options: McpToolDefinitionsOptions): { tools: AnyToolDefinition[]; skipped: SkippedMcpTool[] } {
  const served: AnyToolDefinition[] = [];
  const skipped: SkippedMcpTool[] = [];
  const prefix = options.prefix ?? '';
  for (const tool of tools) {
    if (!isToken(`${prefix}${tool.name}`)) {
      const which = prefix ? `its name after the prefix ${JSON.stringify(prefix)}` : 'its name';
      skipped.push({ name: tool.name, reason: `${which} is not a bus subject token ([A-Za-z0-9_-]{1,64})` });
      continue;
    }
    if (tool.execution?.taskSupport === 'required') {
      skipped.push({ name: tool.name, reason: 'it runs only as an MCP task, which agentbus mcp does not call' });
      continue;
    }
    const { name } = tool;
    const { tier, idempotent } = classifyMcpTool(tool.annotations, options.tierOf(name));
    const timeoutMs = options.timeoutOf(name);
    const inputSchema = tool.inputSchema as Record<string, unknown>;
    served.push(
      defineTool({
        name: `${prefix}${name}`,
        description: tool.description ?? tool.title ?? tool.annotations?.title ?? `MCP tool ${name}`,
        jsonSchema: inputSchema,
        parameters: jsonSchemaParameters(options.checks?.(name, inputSchema)),
        tier,
        timeoutMs,
        idempotent,
        execute: (args, context) => options.call(name, args, context, timeoutMs),
      }),
    );
  }
  return { tools: served, skipped };
}
