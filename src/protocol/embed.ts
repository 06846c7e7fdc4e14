import { z } from 'zod';
import type { ErrorData } from '../errors.ts';

/** Most texts in one embed request; a client splits longer lists. */
export const MAX_EMBED_INPUTS = 256;
/** Longest text of one embed input, in characters. */
export const MAX_EMBED_INPUT_CHARS = 32_768;

/**
 * Header of an embed request: how many milliseconds the caller waits for the answer (decimal). The provider stops
 * working on the request (retries included) when that time is up, instead of at its own, longer limit. A header,
 * not a body field, so that providers that predate it take the request as before.
 */
export const EMBED_TIMEOUT_HEADER = 'Agentbus-Timeout-Ms';

/** A request to `agentbus.provider.<provider>.embed`: `{ v: 1, id, input, model? }`. Unknown fields are refused. */
export const embedRequestSchema = z
  .object({
    v: z.literal(1),
    id: z.string().min(1).max(200),
    input: z.array(z.string().min(1).max(MAX_EMBED_INPUT_CHARS)).min(1).max(MAX_EMBED_INPUTS),
    /** The embedding model without the provider prefix; the provider's default when absent. */
    model: z.string().min(1).max(200).optional(),
  })
  .strict();
export type EmbedRequest = z.infer<typeof embedRequestSchema>;

/** The answer: one L2-normalised vector per input, in order, or a typed error. */
export type EmbedReply =
  | { readonly v: 1; readonly id: string; readonly model: string; readonly dimensions: number; readonly vectors: readonly (readonly number[])[] }
  | { readonly v: 1; readonly id: string; readonly error: ErrorData };
