import { z } from 'zod';
import type { EventType } from './events.ts';
import { TOKEN_PATTERN } from './subjects.ts';

/**
 * The v1 envelope `{ v: 1, id, type, tenant, sessionId, turnId?, step?, ts, data }` of one event type, with
 * the given `data` schema. The keys are in the order the envelope factory makes them (zod's output follows
 * the shape), so validated and freshly made events share one object shape. Unknown extra fields pass and
 * are dropped.
 */
export function envelopeSchema<T extends EventType, D extends z.ZodType>(type: T, data: D) {
  return z.object({
    v: z.literal(1),
    id: z.string().min(1),
    type: z.literal(type),
    tenant: z.string().regex(TOKEN_PATTERN, 'tenant must be a subject token'),
    sessionId: z.string().regex(TOKEN_PATTERN, 'sessionId must be a subject token'),
    turnId: z.string().min(1).optional(),
    step: z.int().nonnegative().optional(),
    ts: z.number(),
    data,
  });
}
