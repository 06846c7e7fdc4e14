import { z } from 'zod';
import type { ErrorData } from '../errors.ts';
import type { Codec } from './codec.ts';
import { SafetyTier } from './events.ts';
import { errorDataSchema } from './schemas.ts';

/** When a tool hook runs: before a call is sent to a worker, or after its result came back. */
export const HookPhase = {
  before: 'before',
  after: 'after',
} as const;
export type HookPhase = (typeof HookPhase)[keyof typeof HookPhase];

/** What a hook's reply tells the runtime to do. `block` is for before-hooks only. */
export const HookAction = {
  continue: 'continue',
  block: 'block',
} as const;
export type HookAction = (typeof HookAction)[keyof typeof HookAction];

const callFields = {
  v: z.literal(1),
  /** The tool call's id, as in `tool.use`. */
  callId: z.string().min(1),
  effectId: z.string().min(1),
  /** The tool's name. */
  name: z.string().min(1),
  /** The arguments as they stand: the model's, or an earlier hook's rewrite. */
  args: z.unknown(),
  tier: z.enum([SafetyTier.readOnly, SafetyTier.sideEffecting, SafetyTier.privileged, 'unknown']),
  tenant: z.string(),
  sessionId: z.string(),
  turnId: z.string(),
  /** Epoch milliseconds after which the runtime has stopped waiting for this hook. */
  deadline: z.number(),
};

/** A request to `<prefix>.hooks.<hook>.before`. Unknown fields are ignored (a newer runtime may add some). */
export const beforeHookRequestSchema = z.object(callFields);
export type BeforeHookRequest = z.infer<typeof beforeHookRequestSchema>;

/** A request to `<prefix>.hooks.<hook>.after`: the call as sent, and its result (scrubbed, cut to the runtime's limit). */
export const afterHookRequestSchema = z.object({
  ...callFields,
  output: z.string(),
  isError: z.boolean(),
  error: errorDataSchema.optional(),
});
export type AfterHookRequest = z.infer<typeof afterHookRequestSchema>;

// Replies are strict: a misspelt field (`arg` for `args`) must not pass as a plain `continue`.
const replyBase = { v: z.literal(1), callId: z.string().optional() };
/** Rewritten arguments: a JSON object, as the model's are. */
const hookArgs = z.record(z.string(), z.unknown());

/**
 * A before-hook's decision: go on (`args` replaces the arguments), or block the call (`output` becomes its
 * result; `isError` defaults to true).
 */
export const beforeHookReplySchema = z.discriminatedUnion('action', [
  z.strictObject({ ...replyBase, action: z.literal(HookAction.continue), args: hookArgs.optional() }),
  z.strictObject({ ...replyBase, action: z.literal(HookAction.block), output: z.string(), isError: z.boolean().optional() }),
]);
export type BeforeHookReply = z.infer<typeof beforeHookReplySchema>;

/** An after-hook's decision: keep the result, or replace its `output` and/or `isError`. */
export const afterHookReplySchema = z.strictObject({
  ...replyBase,
  action: z.literal(HookAction.continue),
  output: z.string().optional(),
  isError: z.boolean().optional(),
});
export type AfterHookReply = z.infer<typeof afterHookReplySchema>;

/** The reply of a hook that failed itself: `{ v: 1, error: { code, message, retryable } }`. */
export const hookFailureReplySchema = z.strictObject({ ...replyBase, error: errorDataSchema });
export type HookFailureReply = z.infer<typeof hookFailureReplySchema>;

/** A decoded hook reply: its decision, or the error the hook reported. */
export type HookReply<R> = { readonly ok: true; readonly reply: R } | { readonly ok: false; readonly error: ErrorData };

/**
 * Decodes and validates a hook's reply (msgpack or JSON by `Content-Type`). A body with an `error` field is the
 * hook's own failure; anything else must be a decision of `phase`. Throws `InvalidInputError` naming the first
 * problem.
 *
 * @example
 * const decoded = decodeHookReply(codec, HookPhase.before, message.data, contentTypeOf(message));
 * if (decoded.ok && decoded.reply.action === 'block') console.log(decoded.reply.output);
 */
export function decodeHookReply(codec: Codec, phase: typeof HookPhase.before, bytes: Uint8Array, contentType?: string): HookReply<BeforeHookReply>;
export function decodeHookReply(codec: Codec, phase: typeof HookPhase.after, bytes: Uint8Array, contentType?: string): HookReply<AfterHookReply>;
export function decodeHookReply(codec: Codec, phase: HookPhase, bytes: Uint8Array, contentType?: string): HookReply<BeforeHookReply | AfterHookReply> {
  const value = codec.decode(bytes, contentType);
  const what = `${phase} hook reply`;
  if (typeof value === 'object' && value !== null && 'error' in value) {
    return { ok: false, error: codec.validate(hookFailureReplySchema, value, what).error };
  }
  const reply = phase === HookPhase.before ? codec.validate(beforeHookReplySchema, value, what) : codec.validate(afterHookReplySchema, value, what);
  return { ok: true, reply };
}
