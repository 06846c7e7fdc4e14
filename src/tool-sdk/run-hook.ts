import { AgentbusError, ErrorCode, TimeoutError, abortReason, toErrorData } from '../errors.ts';
import type { ErrorData } from '../errors.ts';
import type { Logger } from '../logging.ts';
import { HookPhase, afterHookReplySchema, beforeHookReplySchema } from '../protocol/index.ts';
import type { AfterHookReply, AfterHookRequest, BeforeHookReply, BeforeHookRequest, HookFailureReply } from '../protocol/index.ts';
import { abortPromise } from '../bus/request.ts';

/** What a hook handler is given besides the request. */
export interface HookContext {
  /** Aborts when the request's deadline passes or the worker stops; hand it to every I/O the handler does. */
  readonly signal: AbortSignal;
  readonly logger: Logger;
}

type WithoutEnvelope<T> = T extends unknown ? Omit<T, 'v' | 'callId'> : never;

/**
 * A before-hook's decision: `{ action: 'continue' }`, `{ action: 'continue', args }` (the call goes on with these
 * arguments, an object) or `{ action: 'block', output, isError? }` (the call reaches no worker; `output` is its
 * result, an error unless `isError: false`).
 */
export type BeforeHookDecision = WithoutEnvelope<BeforeHookReply>;

/** An after-hook's decision: `{ action: 'continue' }`, or with `output` and/or `isError` to rewrite the result. */
export type AfterHookDecision = WithoutEnvelope<AfterHookReply>;

/** Decides on a call before it is sent. Throw to fail (the runtime's `AGENTBUS_TOOL_HOOK_ON_ERROR` then decides). */
export type BeforeHookHandler = (request: BeforeHookRequest, context: HookContext) => BeforeHookDecision | Promise<BeforeHookDecision>;

/** Decides on a call's result before the model sees it. */
export type AfterHookHandler = (request: AfterHookRequest, context: HookContext) => AfterHookDecision | Promise<AfterHookDecision>;

/** One request to a hook, decoded, and what answers it. */
export type HookJob =
  | { readonly phase: typeof HookPhase.before; readonly request: BeforeHookRequest; readonly handler: BeforeHookHandler }
  | { readonly phase: typeof HookPhase.after; readonly request: AfterHookRequest; readonly handler: AfterHookHandler };

/** The reply body of a hook request. */
export type HookReplyBody = BeforeHookReply | AfterHookReply | HookFailureReply;

/** A failure reply of a hook. */
export function hookFailureReply(callId: string, error: ErrorData): HookFailureReply {
  return { v: 1, ...(callId ? { callId } : {}), error: { code: error.code, message: error.message, retryable: error.retryable } };
}

function failure(error: unknown): ErrorData {
  if (error instanceof AgentbusError) return toErrorData(error);
  const message = error instanceof Error ? error.message : String(error);
  return { code: ErrorCode.internal, message: message || 'the hook failed', retryable: false };
}

/**
 * Runs a hook's handler on one request under a signal that combines `signal` (the worker stopping) and the
 * request's deadline, and turns the outcome into a reply: the handler's decision (checked against the reply
 * schema, so a handler cannot send what the runtime would refuse), or `{ error }`. Never throws. A handler that
 * ignores its signal is not waited for.
 */
export async function runHook(job: HookJob, options: { signal: AbortSignal; now: () => number; logger: Logger }): Promise<HookReplyBody> {
  const { request } = job;
  const callId = request.callId;
  const remaining = request.deadline - options.now();
  if (remaining <= 0) return hookFailureReply(callId, toErrorData(new TimeoutError(`the deadline of the ${job.phase} hook passed before it started`, 0)));
  if (options.signal.aborted) return hookFailureReply(callId, toErrorData(abortReason(options.signal)));
  const controller = new AbortController();
  const { signal } = controller;
  const onAbort = () => controller.abort(options.signal.reason);
  options.signal.addEventListener('abort', onAbort, { once: true });
  const timer = setTimeout(() => controller.abort(new TimeoutError(`the ${job.phase} hook ran past the caller's deadline (${Math.round(remaining)} ms)`, remaining)), remaining);
  const { promise: aborted, cleanup } = abortPromise(signal);
  const context: HookContext = { signal, logger: options.logger };
  try {
    const decided: unknown = await Promise.race([
      Promise.resolve().then(() => (job.phase === HookPhase.before ? job.handler(job.request, context) : job.handler(job.request, context))),
      aborted,
    ]);
    const body = typeof decided === 'object' && decided !== null ? { v: 1, callId, ...decided } : decided;
    const schema = job.phase === HookPhase.before ? beforeHookReplySchema : afterHookReplySchema;
    const checked = schema.safeParse(body);
    if (checked.success) return checked.data;
    const issue = checked.error.issues[0];
    const where = issue && issue.path.length > 0 ? `${issue.path.join('.')}: ` : '';
    options.logger.error({ callId, phase: job.phase, issue: `${where}${issue?.message ?? 'invalid'}` }, 'hook handler returned an invalid decision');
    return hookFailureReply(callId, { code: ErrorCode.internal, message: `the ${job.phase} hook returned an invalid decision: ${where}${issue?.message ?? 'invalid'}`, retryable: false });
  } catch (error) {
    if (signal.aborted) return hookFailureReply(callId, toErrorData(abortReason(signal)));
    options.logger.warn({ err: error, callId, phase: job.phase }, 'hook handler failed');
    return hookFailureReply(callId, failure(error));
  } finally {
    clearTimeout(timer);
    options.signal.removeEventListener('abort', onAbort);
    cleanup();
  }
}
