import { z } from 'zod';
import type { ToolMetadataKey } from '../protocol/index.ts';
import type { AnyToolDefinition } from './define-tool.ts';

/**
 * The JSON Schema of a tool's arguments, as the model is shown it (no `$schema`): the tool's own `jsonSchema` when
 * it has one, else its zod `parameters` converted (input side).
 */
export function toolParametersSchema(tool: AnyToolDefinition): Record<string, unknown> {
  const { $schema: _ignored, ...schema } = tool.jsonSchema ?? z.toJSONSchema(tool.parameters, { io: 'input', unrepresentable: 'any' });
  return schema;
}

/** The endpoint metadata a worker announces for a tool (read back by the protocol's `parseToolMetadata`). */
export function toToolMetadata(tool: AnyToolDefinition): Record<ToolMetadataKey, string> {
  return {
    description: tool.description,
    parameters: JSON.stringify(toolParametersSchema(tool)),
    tier: tool.tier,
    timeoutMs: String(tool.timeoutMs),
    idempotent: String(tool.idempotent),
  };
}
