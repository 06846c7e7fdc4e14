import { z } from 'zod';
import { envelopeSchema } from './envelope-schema.ts';
import { LiveEventType } from './events.ts';
import { chatMessageSchema, errorDataSchema } from './schemas.ts';

// The shapes of `EventDataMap` (events.ts) for the ephemeral `live.<type>` events, as clients read them. The
// fields a client shows or acts on are checked exactly; unknown extra fields pass (and are dropped), so a
// newer runtime's events still read. Bounds are only those that hold for what the runtime publishes:
// `attempt`, `maxAttempts` and `delayMs` of a retry come from a provider's chunk as they are.

const assistantDelta = z.object({ text: z.string() });

const toolProgress = z.object({ toolCallId: z.string(), name: z.string(), message: z.string(), progress: z.number().optional(), total: z.number().optional() });

const progress = z.object({
  kind: z.enum(['provider_call', 'tool_execution', 'rolling_summary']),
  message: z.string(),
  step: z.int().nonnegative(),
  maxSteps: z.int().nonnegative(),
  toolNames: z.array(z.string()).readonly().optional(),
});

// `machine` is `turn` or `session` today; a client that knows neither just shows it.
const state = z.object({ machine: z.string(), value: z.string(), event: z.string() });

const retry = z.object({
  attempt: z.int(),
  maxAttempts: z.int(),
  delayMs: z.number(),
  error: errorDataSchema,
  model: z.string().optional(),
  nextModel: z.string().optional(),
  tool: z.string().optional(),
  toolCallId: z.string().optional(),
});

const error = errorDataSchema.extend({ subject: z.string().optional() });

const requestPrepared = z.object({
  model: z.string(),
  fallbackModels: z.array(z.string()).readonly().optional(),
  messages: z.array(chatMessageSchema).readonly(),
  tools: z.array(z.object({ name: z.string(), description: z.string(), parameters: z.record(z.string(), z.unknown()) })).readonly(),
  maxOutputTokens: z.number(),
  maxSteps: z.int(),
  maxCost: z.number().optional(),
  needsCompaction: z.boolean(),
  forceTool: z.object({ name: z.string(), args: z.unknown() }).optional(),
});

/**
 * A live event: the v1 envelope with the `data` of its type, as one discriminated union on `type`. Its
 * output is a `LiveEvent`. Which schema applies is decided by the subject, not by `type`: a log event type
 * on a `live.<type>` subject is refused here (see `decodeSessionEvent`).
 *
 * @example
 * const event = codec.validate(liveEventSchema, codec.decode(message.data), 'live event');
 */
export const liveEventSchema = z.discriminatedUnion('type', [
  envelopeSchema(LiveEventType.assistantDelta, assistantDelta),
  envelopeSchema(LiveEventType.toolProgress, toolProgress),
  envelopeSchema(LiveEventType.progress, progress),
  envelopeSchema(LiveEventType.state, state),
  envelopeSchema(LiveEventType.retry, retry),
  envelopeSchema(LiveEventType.error, error),
  envelopeSchema(LiveEventType.requestPrepared, requestPrepared),
]);
