import { z } from 'zod';
import { ContentType, SafetyTier } from '../protocol/index.ts';
import type { Codec } from '../protocol/index.ts';
import type { AnyToolDefinition } from './define-tool.ts';

/** The keys of a tool endpoint's `$SRV` metadata; every value is a string. */
export const ToolMetadataKey = {
  description: 'description',
  /** The JSON Schema of the arguments, as a JSON string. */
  parameters: 'parameters',
  tier: 'tier',
  /** Decimal milliseconds. */
  timeoutMs: 'timeoutMs',
  /** `true` or `false`. */
  idempotent: 'idempotent',
} as const;
export type ToolMetadataKey = (typeof ToolMetadataKey)[keyof typeof ToolMetadataKey];

/** A tool as the runtime sees it: what a live worker announced. */
export interface ToolDescriptor {
  readonly name: string;
  readonly description: string;
  /** JSON Schema object of the arguments. */
  readonly parameters: Record<string, unknown>;
  readonly tier: SafetyTier;
  readonly timeoutMs: number;
  readonly idempotent: boolean;
}

/**
 * The JSON Schema of a tool's arguments, as the model is shown it (no `$schema`): the tool's own `jsonSchema` when
 * it has one, else its zod `parameters` converted (input side).
 */
export function toolParametersSchema(tool: AnyToolDefinition): Record<string, unknown> {
  const { $schema: _ignored, ...schema } = tool.jsonSchema ?? z.toJSONSchema(tool.parameters, { io: 'input', unrepresentable: 'any' });
  return schema;
}

/** The endpoint metadata a worker announces for a tool. */
export function toToolMetadata(tool: AnyToolDefinition): Record<ToolMetadataKey, string> {
  return {
    description: tool.description,
    parameters: JSON.stringify(toolParametersSchema(tool)),
    tier: tool.tier,
    timeoutMs: String(tool.timeoutMs),
    idempotent: String(tool.idempotent),
  };
}

const parametersSchema = z.record(z.string(), z.unknown());

const metadataSchema = z.object({
  description: z.string(),
  parameters: z.string(),
  tier: z.enum([SafetyTier.readOnly, SafetyTier.sideEffecting, SafetyTier.privileged]),
  timeoutMs: z.string().regex(/^\d+$/),
  idempotent: z.enum(['true', 'false']),
});

/**
 * Reads a tool descriptor back from endpoint metadata. Returns undefined when a key is missing or
 * malformed, so one broken worker cannot poison the tool list.
 */
export function parseToolMetadata(
  name: string,
  metadata: Readonly<Record<string, string>>,
  codec: Codec,
): ToolDescriptor | undefined {
  const fields = metadataSchema.safeParse(metadata);
  if (!fields.success) return undefined;
  let parameters: unknown;
  try {
    parameters = codec.decode(new TextEncoder().encode(fields.data.parameters), ContentType.json);
  } catch {
    // Malformed JSON: the tool is left out, as the JSDoc says; the caller logs what it skipped.
    return undefined;
  }
  const schema = parametersSchema.safeParse(parameters);
  if (!schema.success) return undefined;
  return {
    name,
    description: fields.data.description,
    parameters: schema.data,
    tier: fields.data.tier,
    timeoutMs: Number(fields.data.timeoutMs),
    idempotent: fields.data.idempotent === 'true',
  };
}
