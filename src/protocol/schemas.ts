import { z } from 'zod';

/** `<provider>:<model>`, e.g. `openai:gpt-5.4-mini` or `scripted:default`. */
export const MODEL_PATTERN = /^[A-Za-z0-9_-]{1,64}:[^\s]{1,200}$/;

const errorData = z.object({ code: z.string(), message: z.string(), retryable: z.boolean() });

const metadata = z.record(z.string(), z.unknown());

/** The most files one prompt may attach. */
export const MAX_PROMPT_ATTACHMENTS = 16;
/** The most characters of one attachment's content. */
export const MAX_ATTACHMENT_CHARS = 256 * 1024;
/** The most characters of a prompt's text and attachments together. */
export const MAX_PROMPT_CHARS = 1_000_000;

/** A text file sent with a prompt: the runtime puts its name and content in the turn's user message. */
const attachment = z.strictObject({
  name: z.string().min(1, 'attachments[].name must not be empty').max(256),
  content: z.string().max(MAX_ATTACHMENT_CHARS, `attachments[].content must be at most ${MAX_ATTACHMENT_CHARS} characters`),
});

/** The most characters a prompt's `outputSchema` may take, written as JSON. */
export const MAX_OUTPUT_SCHEMA_CHARS = 32 * 1024;

/**
 * A prompt's `outputSchema`: a JSON Schema object whose root is `{ "type": "object", … }` (what every provider's native
 * structured output takes), at most {@link MAX_OUTPUT_SCHEMA_CHARS} as JSON. Whether it is a valid JSON Schema is
 * checked by the runtime on ingress (`src/output-schema.ts`), not here: that needs a schema validator.
 */
const outputSchema = z
  .record(z.string(), z.unknown())
  .refine((schema) => schema.type === 'object', { message: 'outputSchema must be a JSON Schema object whose "type" is "object"' })
  .refine((schema) => JSON.stringify(schema).length <= MAX_OUTPUT_SCHEMA_CHARS, { message: `outputSchema must be at most ${MAX_OUTPUT_SCHEMA_CHARS} characters as JSON` });

/** The most models one prompt may name in `models`. */
export const MAX_PROMPT_MODELS = 8;

/** The longest deadline a prompt may ask for (`deadlineMs`): one day. */
export const MAX_DEADLINE_MS = 24 * 60 * 60_000;

const modelName = (field: string) => z.string().regex(MODEL_PATTERN, `${field} must be <provider>:<model>`);

/**
 * The call that started a child session (an agent profile called as a tool): the calling session, its turn, the
 * model's id of the call and its stable `effectId`. Carried by the child's prompt and logged in its
 * `session.created` and `user.message`.
 */
export const parentCallSchema = z.strictObject({
  sessionId: z.string().regex(/^[A-Za-z0-9_-]{1,64}$/, 'parent.sessionId must match [A-Za-z0-9_-]{1,64}'),
  turnId: z.string().min(1).max(256),
  toolCallId: z.string().min(1).max(256),
  effectId: z.string().min(1).max(1024),
  /** How deep the child is: 1 for a child of a session no agent call started, and so on. */
  depth: z.int().min(1).max(64).optional(),
});
/** The call that started a child session. */
export type ParentCall = z.infer<typeof parentCallSchema>;

/**
 * The body of a prompt. Unknown fields are refused.
 *
 * - `model`, `models`: the fallback chain, `model` first, then `models` in order. A step moves to the
 *   next model when a provider fails for good before answering (see `docs/llm-providers.md`).
 * - `smallModel` + `largeModel` (together): small model first, escalated to the large one when
 *   `complex` is true, when tool arguments fail validation twice in the turn, or when the context
 *   outgrows the small model's window.
 * - `deadlineMs`: the turn ends `deadline_exceeded` this many milliseconds after the prompt is accepted
 *   (at most {@link MAX_DEADLINE_MS}); without it, the runtime's `AGENTBUS_TURN_TIMEOUT_MS`.
 * - `finalAnswer: false`: at `maxSteps` the turn ends without a last call that answers from what it has.
 * - `attachments`: text files; the runtime appends each, name and content, to the logged user message.
 * - `dryRun`: prepare the first step (system prompt, recall, tools, budgets) and publish it as a live
 *   `request.prepared` event; nothing is logged and no model is called.
 * - `forceTool` (`{ name, args }`): the first step makes this call without asking the model; `forceFinish`:
 *   the first step is offered no tools. For pinning a step in tests.
 * - `profile`: run the turn as this agent profile of the tenant (its system prompt, model, tools allow-list and
 *   budgets; `AGENTBUS_PROFILES`); an unknown profile is refused.
 * - `parent` (`{ sessionId, turnId, toolCallId, effectId }`): the session is a child started by that call; set by
 *   the runtime when an agent profile is called as a tool, logged in the child's `session.created`.
 * - `outputSchema`: a JSON Schema (root `type: "object"`) the turn's final answer must match; the answer is delivered
 *   parsed as `turn.ended.data.output` (see `docs/protocol.md`, "Typed final output").
 */
export const promptSchema = z
  .strictObject({
    text: z.string().min(1, 'text must not be empty').max(1_000_000),
    model: modelName('model').optional(),
    models: z.array(modelName('models[]')).min(1).max(MAX_PROMPT_MODELS).optional(),
    smallModel: modelName('smallModel').optional(),
    largeModel: modelName('largeModel').optional(),
    complex: z.boolean().optional(),
    maxSteps: z.int().min(1).max(1000).optional(),
    maxCost: z.number().positive().optional(),
    deadlineMs: z.int().min(1).max(MAX_DEADLINE_MS, `deadlineMs must be at most ${MAX_DEADLINE_MS} (one day)`).optional(),
    finalAnswer: z.boolean().optional(),
    metadata: metadata.optional(),
    attachments: z.array(attachment).max(MAX_PROMPT_ATTACHMENTS).optional(),
    dryRun: z.boolean().optional(),
    forceTool: z.strictObject({ name: z.string().min(1).max(256), args: z.record(z.string(), z.unknown()) }).optional(),
    forceFinish: z.boolean().optional(),
    profile: z.string().regex(/^[A-Za-z0-9_-]{1,64}$/, 'profile must match [A-Za-z0-9_-]{1,64}').optional(),
    parent: parentCallSchema.optional(),
    outputSchema: outputSchema.optional(),
  })
  .refine((prompt) => (prompt.smallModel === undefined) === (prompt.largeModel === undefined), {
    message: 'smallModel and largeModel must be given together',
    path: ['largeModel'],
  })
  .refine((prompt) => !(prompt.forceTool && prompt.forceFinish), { message: 'forceTool and forceFinish exclude each other', path: ['forceFinish'] })
  .refine((prompt) => (prompt.attachments ?? []).reduce((total, file) => total + file.name.length + file.content.length, prompt.text.length) <= MAX_PROMPT_CHARS, {
    message: `text and attachments together must be at most ${MAX_PROMPT_CHARS} characters`,
    path: ['attachments'],
  });
export type Prompt = z.infer<typeof promptSchema>;

/** The body of a steer message; a bare string is taken as `{ text }`. */
export const steerSchema = z.strictObject({ text: z.string().min(1).max(1_000_000) });
export type Steer = z.infer<typeof steerSchema>;

/** The body of a cancel message (may be empty). */
export const cancelSchema = z.strictObject({ reason: z.string().max(1000).optional() });
export type Cancel = z.infer<typeof cancelSchema>;

/** The most characters of a text result given in a tool's place (`respond`) or of an answer to a tool's question. */
export const MAX_HUMAN_TEXT_CHARS = 100_000;

/**
 * The body of an approval decision: approve or deny (`approved`, `reason?`), approve with edited arguments
 * (`approved: true` and `args`, checked against the tool's JSON Schema `parameters`), or answer in the tool's place
 * (`respond`: the text becomes the call's `tool.result`, the tool does not run; `approved` then absent or false).
 */
export const approveSchema = z
  .strictObject({
    toolCallId: z.string().min(1).max(200),
    approved: z.boolean().optional(),
    reason: z.string().max(10_000).optional(),
    args: z.record(z.string(), z.unknown()).optional(),
    respond: z.string().max(MAX_HUMAN_TEXT_CHARS).optional(),
  })
  .refine((decision) => decision.approved !== undefined || decision.respond !== undefined, { message: 'approved or respond is required', path: ['approved'] })
  .refine((decision) => decision.args === undefined || decision.approved === true, { message: 'args (edited arguments) need approved: true', path: ['args'] })
  .refine((decision) => decision.respond === undefined || (decision.approved !== true && decision.args === undefined), {
    message: 'respond answers in the tool\'s place: it excludes approved: true and args',
    path: ['respond'],
  });
export type Approve = z.infer<typeof approveSchema>;

/**
 * The body of an answer to a tool's question (`tool.input_requested`), on `agentbus.<t>.sessions.<sid>.input`:
 * `answer` is any JSON value (checked against the request's `schema` when it has one); `requestId`, when given,
 * must name the open request.
 */
export const inputAnswerSchema = z.strictObject({
  toolCallId: z.string().min(1).max(200),
  requestId: z.string().min(1).max(300).optional(),
  answer: z.unknown().refine((value) => value !== undefined, 'answer is required'),
});
export type InputAnswer = z.infer<typeof inputAnswerSchema>;

/** The reply to a prompt request. */
export interface PromptReply {
  readonly accepted: boolean;
  readonly sessionId: string;
  readonly turnId?: string;
  readonly error?: z.infer<typeof errorData>;
}

/** A reply to cancel, steer and approve requests. */
export interface CommandReply {
  readonly ok: boolean;
  readonly turnId?: string;
  readonly error?: z.infer<typeof errorData>;
}

const toolCall = z.object({ id: z.string(), name: z.string(), args: z.unknown() });

/** One message of the conversation sent to a provider (`ChatMessage`). */
export const chatMessageSchema = z.discriminatedUnion('role', [
  z.object({ role: z.literal('system'), content: z.string() }),
  z.object({ role: z.literal('user'), content: z.string() }),
  z.object({ role: z.literal('assistant'), content: z.string(), toolCalls: z.array(toolCall).readonly().optional() }),
  z.object({
    role: z.literal('tool'),
    toolCallId: z.string(),
    name: z.string(),
    content: z.string(),
    isError: z.boolean().optional(),
  }),
]);

/**
 * A request to `agentbus.tools.<name>.call`. `callId` names this one attempt: the runtime mints a new one, unique
 * across the fleet, for every send of a call, and a cancel names it. `toolCallId` is the model's own id of the
 * call, for logs only (models reuse ids such as `call_0`; a worker must not key anything by it). `effectId` is
 * stable across the attempts of one logical call.
 */
export const toolCallRequestSchema = z.object({
  v: z.literal(1),
  callId: z.string().min(1),
  toolCallId: z.string().max(256).optional(),
  effectId: z.string().min(1),
  name: z.string().min(1),
  args: z.unknown(),
  tenant: z.string(),
  sessionId: z.string(),
  turnId: z.string(),
  /** Epoch milliseconds after which the caller has given up. */
  deadline: z.number(),
  /**
   * The answers to the questions this call asked so far (`input_required` replies), oldest first: the call is made
   * again with the same `effectId` after each answer (see docs/protocol.md, "A tool asks the user").
   */
  inputs: z.array(z.object({ requestId: z.string(), question: z.string(), answer: z.unknown() })).readonly().optional(),
});
export type ToolCallRequest = z.infer<typeof toolCallRequestSchema>;

/** The reply of a tool worker. */
export const toolCallReplySchema = z.discriminatedUnion('ok', [
  z.object({ v: z.literal(1), callId: z.string(), ok: z.literal(true), output: z.unknown() }),
  z.object({
    v: z.literal(1),
    callId: z.string(),
    ok: z.literal(false),
    error: errorData,
    /** With `error.code` `input_required`: the call is suspended until the user answers this question. */
    inputRequest: z.object({ question: z.string().min(1).max(10_000), schema: z.record(z.string(), z.unknown()).optional() }).optional(),
  }),
]);
export type ToolCallReply = z.infer<typeof toolCallReplySchema>;

/**
 * A cancel of a provider or tool call in flight; the callee that holds it replies with {@link CancelAck}. A tool
 * cancel also names the call's `tenant` and `sessionId`: a worker aborts (or remembers the cancel for) only a call
 * of that scope. An older runtime's cancel names neither and is matched by `id` alone.
 */
export const cancelRequestSchema = z.object({
  v: z.literal(1),
  id: z.string().min(1),
  tenant: z.string().max(64).optional(),
  sessionId: z.string().max(64).optional(),
});
export type CancelRequest = z.infer<typeof cancelRequestSchema>;
export interface CancelAck {
  readonly v: 1;
  readonly id: string;
  readonly cancelled: boolean;
  /** Why a cancel that could not be read was refused (`id` is then empty): every callee that hears it says so. */
  readonly error?: { readonly code: string; readonly message: string; readonly retryable: boolean };
}

/** A request to `agentbus.provider.<provider>.generate`. */
export const generateRequestSchema = z.object({
  v: z.literal(1),
  requestId: z.string().min(1),
  model: z.string().min(1),
  messages: z.array(chatMessageSchema),
  tools: z.array(z.object({ name: z.string(), description: z.string(), parameters: z.record(z.string(), z.unknown()) })),
  maxTokens: z.int().positive().optional(),
  temperature: z.number().min(0).max(2).optional(),
  /**
   * The JSON Schema the answer must match when it is a final answer (no tool calls): a provider uses its model's
   * native structured output where it has one. Tools may still be called.
   */
  outputSchema: z.record(z.string(), z.unknown()).optional(),
  /** Optional scope, used by the scripted provider to keep one script cursor per session. */
  tenant: z.string().optional(),
  sessionId: z.string().optional(),
  turnId: z.string().optional(),
});
export type GenerateRequest = z.infer<typeof generateRequestSchema>;

const usage = z.object({ inputTokens: z.number(), outputTokens: z.number() });

/** One chunk of a provider's streamed answer. */
export const generateChunkSchema = z.discriminatedUnion('type', [
  z.object({ v: z.literal(1), requestId: z.string(), seq: z.int(), type: z.literal('text-delta'), text: z.string() }),
  z.object({
    v: z.literal(1),
    requestId: z.string(),
    seq: z.int(),
    type: z.literal('tool-call'),
    toolCallId: z.string(),
    name: z.string(),
    args: z.unknown(),
  }),
  z.object({ v: z.literal(1), requestId: z.string(), seq: z.int(), type: z.literal('usage'), usage }),
  z.object({
    v: z.literal(1),
    requestId: z.string(),
    seq: z.int(),
    type: z.literal('done'),
    finishReason: z.string(),
    model: z.string().optional(),
    cost: z.number().optional(),
  }),
  z.object({ v: z.literal(1), requestId: z.string(), seq: z.int(), type: z.literal('error'), error: errorData }),
  z.object({
    v: z.literal(1),
    requestId: z.string(),
    seq: z.int(),
    type: z.literal('retry'),
    attempt: z.int(),
    maxAttempts: z.int(),
    delayMs: z.number(),
    error: errorData,
  }),
]);
export type GenerateChunk = z.infer<typeof generateChunkSchema>;
/** A chunk without its envelope fields, as an adapter yields it. */
export type ChunkBody = GenerateChunk extends infer C ? (C extends GenerateChunk ? Omit<C, 'v' | 'requestId' | 'seq'> : never) : never;

/** Field schemas the durable log's event schemas (`log-schemas.ts`) share with the messages above. */
export { errorData as errorDataSchema, toolCall as toolCallSchema, usage as usageSchema, modelName as modelNameSchema };
