import type { CompatibilityCallToolResult, ContentBlock } from '@modelcontextprotocol/sdk/types.js';
import { ErrorCode, ToolError } from '../errors.ts';

/** Most characters of output a call hands back; past it the text is cut with a note (a bus message has a size limit). */
export const MCP_OUTPUT_LIMIT = 100_000;

/** The size in bytes of base64 data, for a summary of a part that is not text. */
function base64Bytes(data: string): number {
  const padding = data.endsWith('==') ? 2 : data.endsWith('=') ? 1 : 0;
  return Math.max(0, Math.floor((data.length * 3) / 4) - padding);
}

/**
 * One content part of an MCP tool result as text: text as it is, an embedded text resource under a header line, and
 * a one-line summary of anything binary (images, audio, blobs) or linked, which a text-only transcript cannot carry.
 */
export function contentPartText(part: ContentBlock): string {
  switch (part.type) {
    case 'text':
      return part.text;
    case 'image':
    case 'audio':
      return `[${part.type}: ${part.mimeType}, ${base64Bytes(part.data)} bytes, not shown]`;
    case 'resource_link':
      return `[resource link: ${part.name} ${part.uri}${part.description ? ` — ${part.description}` : ''}]`;
    case 'resource': {
      const { resource } = part;
      if ('text' in resource) return `[resource ${resource.uri}]\n${resource.text}`;
      return `[resource ${resource.uri}: ${resource.mimeType ?? 'binary'}, ${base64Bytes(resource.blob)} bytes, not shown]`;
    }
    default:
      return JSON.stringify(part);
  }
}

/** `text` cut to `limit` characters, with a note of how much was left out. */
function capped(text: string, limit: number): string {
  return text.length <= limit ? text : `${text.slice(0, limit)}\n[truncated: ${text.length - limit} more characters not shown]`;
}

/**
 * The output of a call from an MCP tool result: its `structuredContent` when it has some (and it fits the limit),
 * else its content parts as text, joined by newlines (see {@link contentPartText}) and cut at `limit` characters.
 * A result with `isError: true` throws a `ToolError` `tool_failed` with the content's text as the message, so the
 * call fails as any tool's would. A result of the old protocol (`toolResult`) is handed back as it is.
 *
 * @example
 * mcpResultOutput({ content: [{ type: 'text', text: '3' }] }, 'add'); // '3'
 */
export function mcpResultOutput(result: CompatibilityCallToolResult, toolName: string, limit = MCP_OUTPUT_LIMIT): unknown {
  if (!('content' in result) || !Array.isArray(result.content)) return 'toolResult' in result ? result.toolResult : null;
  const text = capped((result.content as ContentBlock[]).map(contentPartText).join('\n'), limit);
  if (result.isError === true) {
    throw new ToolError(ErrorCode.toolFailed, text || `the MCP tool ${toolName} failed and said nothing more`);
  }
  const structured = result.structuredContent;
  if (structured !== undefined && JSON.stringify(structured).length <= limit) return structured;
  return text;
}
