import { z } from 'zod';
import { envelopeSchema } from './envelope-schema.ts';
import { LogEventType, SafetyTier, TurnEndReason } from './events.ts';
import { errorDataSchema, modelNameSchema, toolCallSchema, usageSchema } from './schemas.ts';
import { traceContextSchema } from './trace-context.ts';

// The shapes of `EventDataMap` (events.ts) for the durable log. Fields the runtime acts on when it reads a log
// back are checked exactly; unknown extra fields pass (and are dropped), so a log written by a newer runtime
// still reads. Every bound here must also hold for what the runtime itself writes: ids inside `data` come
// from providers and may be any string, `durationMs` comes from a wall clock that may step back.

const parentCall = z.object({ sessionId: z.string(), turnId: z.string(), toolCallId: z.string(), effectId: z.string(), depth: z.int().positive().optional() });

const sessionCreated = z.object({ createdBy: z.string(), parent: parentCall.optional() });

const sessionForked = z.object({
  parentSessionId: z.string().regex(/^[A-Za-z0-9_-]{1,64}$/),
  parentSeq: z.int().nonnegative(),
  forkedBy: z.string(),
});

// What a resumed turn is run with comes from here, so models are checked as a prompt's are.
const userMessage = z.object({
  text: z.string(),
  model: modelNameSchema('model').optional(),
  models: z.array(modelNameSchema('models[]')).readonly().optional(),
  smallModel: modelNameSchema('smallModel').optional(),
  largeModel: modelNameSchema('largeModel').optional(),
  complex: z.boolean().optional(),
  maxSteps: z.int().positive().optional(),
  maxCost: z.number().positive().optional(),
  deadlineMs: z.int().positive().optional(),
  finalAnswer: z.boolean().optional(),
  metadata: z.record(z.string(), z.unknown()).optional(),
  steer: z.boolean().optional(),
  files: z.array(z.object({ name: z.string(), chars: z.int().nonnegative() })).readonly().optional(),
  forceTool: z.object({ name: z.string(), args: z.unknown() }).optional(),
  forceFinish: z.boolean().optional(),
  outputSchema: z.record(z.string(), z.unknown()).optional(),
  outputRetry: z.boolean().optional(),
  requestId: z.string().max(1024).optional(),
  trace: traceContextSchema.optional(),
  profile: z.string().optional(),
  parent: parentCall.optional(),
});

const turnStarted = z.object({
  model: z.string(),
  models: z.array(z.string()).readonly().optional(),
  maxSteps: z.int().positive(),
  maxCost: z.number().positive().optional(),
  deadline: z.number(),
  finalAnswer: z.boolean(),
  trace: traceContextSchema.optional(),
});

const assistantMessage = z.object({
  text: z.string(),
  toolCalls: z.array(toolCallSchema).readonly(),
  usage: usageSchema,
  cost: z.number(),
  model: z.string(),
  finishReason: z.string(),
  latencyMs: z.number().nonnegative().optional(),
  firstTokenMs: z.number().nonnegative().optional(),
  finalAnswer: z.boolean().optional(),
  outputError: z.string().optional(),
  argsRedacted: z.array(z.string()).readonly().optional(),
  forced: z.boolean().optional(),
});

const toolUse = z.object({
  toolCallId: z.string(),
  effectId: z.string(),
  name: z.string(),
  args: z.unknown(),
  tier: z.enum([SafetyTier.readOnly, SafetyTier.sideEffecting, SafetyTier.privileged, 'unknown']),
  argsRewrittenBy: z.array(z.string()).readonly().optional(),
  blockedBy: z.string().optional(),
  argsFinal: z.boolean().optional(),
  argsRedacted: z.boolean().optional(),
  childSessionId: z.string().optional(),
});

const toolResult = z.object({
  toolCallId: z.string(),
  name: z.string(),
  output: z.string(),
  isError: z.boolean(),
  error: errorDataSchema.optional(),
  durationMs: z.number(),
  blockedBy: z.string().optional(),
  outputRewrittenBy: z.array(z.string()).readonly().optional(),
  child: z.object({ sessionId: z.string(), turnId: z.string() }).optional(),
  usage: usageSchema.optional(),
  cost: z.number().optional(),
});

const turnHandoff = z.object({ toolCallId: z.string(), to: z.string(), from: z.string().optional() });

const approvalRequested = z.object({
  toolCallId: z.string(),
  name: z.string(),
  args: z.unknown(),
  argsRedacted: z.boolean().optional(),
  deadline: z.number().optional(),
  onTimeout: z.enum(['deny', 'approve']).optional(),
});

const approvalDecided = z.object({
  toolCallId: z.string(),
  approved: z.boolean(),
  reason: z.string().optional(),
  args: z.unknown().optional(),
  respond: z.string().optional(),
  timedOut: z.boolean().optional(),
});

const toolInputRequested = z.object({
  toolCallId: z.string(),
  name: z.string(),
  requestId: z.string(),
  question: z.string(),
  schema: z.record(z.string(), z.unknown()).optional(),
  deadline: z.number(),
});

const toolInputAnswered = z.object({ toolCallId: z.string(), requestId: z.string(), answer: z.unknown() });

const summaryCreated = z.object({
  text: z.string(),
  throughSeq: z.int().nonnegative(),
  tokens: z.number().nonnegative(),
  model: z.string().optional(),
  usage: usageSchema.optional(),
  cost: z.number().optional(),
});

const summaryFailed = z.object({ throughSeq: z.int().nonnegative(), model: z.string(), error: errorDataSchema });

const turnEnded = z.object({
  reason: z.enum(TurnEndReason),
  text: z.string().optional(),
  output: z.unknown().optional(),
  error: errorDataSchema.optional(),
  usage: usageSchema,
  cost: z.number(),
  steps: z.int().nonnegative(),
});

/**
 * A durable log event: the v1 envelope `{ v: 1, id, type, tenant, sessionId, turnId?, step?, ts, data }`
 * with the `data` of its type, as one discriminated union on `type`. Its output is a `LogEvent` without
 * `seq`.
 *
 * @example
 * const event = codec.validate(logEventSchema, codec.decode(message.data), 'log event');
 */
export const logEventSchema = z.discriminatedUnion('type', [
  envelopeSchema(LogEventType.sessionCreated, sessionCreated),
  envelopeSchema(LogEventType.sessionForked, sessionForked),
  envelopeSchema(LogEventType.userMessage, userMessage),
  envelopeSchema(LogEventType.turnStarted, turnStarted),
  envelopeSchema(LogEventType.assistantMessage, assistantMessage),
  envelopeSchema(LogEventType.toolUse, toolUse),
  envelopeSchema(LogEventType.toolResult, toolResult),
  envelopeSchema(LogEventType.approvalRequested, approvalRequested),
  envelopeSchema(LogEventType.approvalDecided, approvalDecided),
  envelopeSchema(LogEventType.toolInputRequested, toolInputRequested),
  envelopeSchema(LogEventType.toolInputAnswered, toolInputAnswered),
  envelopeSchema(LogEventType.summaryCreated, summaryCreated),
  envelopeSchema(LogEventType.summaryFailed, summaryFailed),
  envelopeSchema(LogEventType.turnEnded, turnEnded),
  envelopeSchema(LogEventType.turnHandoff, turnHandoff),
]);
