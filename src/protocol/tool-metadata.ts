import { z } from 'zod';
import { ContentType } from './codec.ts';
import type { Codec } from './codec.ts';
import { SafetyTier } from './events.ts';

/**
 * The keys of a tool endpoint's `$SRV` metadata; every value is a string. A tool worker announces them
 * (`toToolMetadata` in the tool SDK) and the runtime's tool client reads them back ({@link parseToolMetadata}):
 * they are part of the bus contract, so they live here and neither side imports the other.
 */
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
