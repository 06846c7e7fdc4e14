import { ErrorCode, HookAction, HookPhase } from '../../../src/protocol/index.ts';
import type { BeforeHookRequest, ErrorData } from '../../../src/protocol/index.ts';
import type { Logger } from '../../../src/logging.ts';
import { ToolHookOnError } from '../config.ts';
import type { ToolHookConfig } from '../config.ts';
import type { ToolHookPort } from '../ports.ts';

/** A tool call as its hooks see it; each request adds its own `deadline`. */
export type HookedCall = Omit<BeforeHookRequest, 'deadline'>;

/** A call's result as after-hooks see and rewrite it: `isError` is `error !== undefined`. */
export interface HookedResult {
  readonly output: string;
  readonly error?: ErrorData;
}

/** What the before-hooks made of a call. */
export interface BeforeHooksOutcome {
  /** The arguments to send: the model's, or the last rewrite. */
  readonly args: unknown;
  /** Hooks whose reply carried `args`, in the order they ran. */
  readonly rewrittenBy: readonly string[];
  /** Set when the call must not run: a hook blocked it, or failed under `onError: block`. Its result is this. */
  readonly blocked?: HookedResult & { readonly by: string };
}

/** What the after-hooks made of a result. */
export interface AfterHooksOutcome extends HookedResult {
  /** Hooks that replaced the output or changed `isError`, in the order they ran. */
  readonly rewrittenBy: readonly string[];
}

/** The ordered before- and after-hook chains of a deployment. */
export interface ToolHooks {
  readonly config: ToolHookConfig;
  /** Asks each before-hook in turn; a block (or a failure, under `onError: block`) stops the chain. */
  before(call: HookedCall, options: { signal: AbortSignal }): Promise<BeforeHooksOutcome>;
  /**
   * Asks each after-hook in turn with the result as it stands. `fit` scrubs a rewritten output and cuts it to the
   * runtime's limit before the next hook (or the model) sees it. A failure under `onError: block` withholds the
   * result: it becomes a `hook_failed` error and the chain stops.
   */
  after(call: HookedCall, result: HookedResult, options: { signal: AbortSignal; fit: (output: string) => Promise<string> }): Promise<AfterHooksOutcome>;
}

/** Options of {@link createToolHooks}. */
export interface ToolHooksOptions {
  readonly port: ToolHookPort;
  readonly config: ToolHookConfig;
  readonly logger: Logger;
  readonly now: () => number;
}

/**
 * Creates the hook chains of the runtime. Neither chain asks anything when it has no hooks.
 *
 * @example
 * const hooks = createToolHooks({ port: createHookClient({ nc, subjects, codec, logger }), config: config.toolHooks, logger, now: Date.now });
 * const decided = await hooks.before(call, { signal });
 * if (decided.blocked) … else send the call with decided.args
 */
export function createToolHooks(options: ToolHooksOptions): ToolHooks {
  const { port, config, now } = options;
  const logger = options.logger.child({ component: 'tool-hooks' });
  const timeoutMs = config.timeoutMs;

  /** The error a failed hook leaves, logged at warn; `onError` decides what it does to the call. */
  function failure(hook: string, phase: HookPhase, call: HookedCall, cause: ErrorData): ErrorData {
    const error = { code: ErrorCode.hookFailed, message: `tool hook ${hook} (${phase}) failed: ${cause.code}: ${cause.message}`, retryable: cause.retryable };
    const context = { hook, phase, tool: call.name, callId: call.callId, tenant: call.tenant, sessionId: call.sessionId, cause, onError: config.onError };
    const outcome = phase === HookPhase.before ? 'the call is blocked' : 'the result is withheld';
    logger.warn(context, config.onError === ToolHookOnError.block ? `tool hook failed; ${outcome}` : 'tool hook failed; skipped');
    return error;
  }

  return {
    config,
    async before(call, { signal }) {
      let args = call.args;
      const rewrittenBy: string[] = [];
      for (const hook of config.before) {
        const answer = await port.before(hook, { ...call, args, deadline: now() + timeoutMs }, { signal, timeoutMs });
        if (!answer.ok) {
          const error = failure(hook, HookPhase.before, call, answer.error);
          if (config.onError === ToolHookOnError.continue) continue;
          return { args, rewrittenBy, blocked: { by: hook, output: `${error.code}: ${error.message}`, error } };
        }
        const reply = answer.reply;
        if (reply.action === HookAction.block) {
          logger.debug({ hook, tool: call.name, callId: call.callId }, 'tool hook blocked a call');
          const error = reply.isError === false ? undefined : { code: ErrorCode.denied, message: `blocked by tool hook ${hook}`, retryable: false };
          return { args, rewrittenBy, blocked: { by: hook, output: reply.output, ...(error ? { error } : {}) } };
        }
        if (reply.args !== undefined) {
          args = reply.args;
          rewrittenBy.push(hook);
        }
      }
      return { args, rewrittenBy };
    },

    async after(call, result, { signal, fit }) {
      let { output, error } = result;
      const rewrittenBy: string[] = [];
      for (const hook of config.after) {
        const body = { ...call, output, isError: error !== undefined, ...(error ? { error } : {}), deadline: now() + timeoutMs };
        const answer = await port.after(hook, body, { signal, timeoutMs });
        if (!answer.ok) {
          const failed = failure(hook, HookPhase.after, call, answer.error);
          if (config.onError === ToolHookOnError.continue) continue;
          // The hook's own error text reaches the log and the model: scrubbed and cut like any output.
          const message = await fit(failed.message);
          return { output: `${failed.code}: ${message}`, error: { ...failed, message }, rewrittenBy };
        }
        const reply = answer.reply;
        let changed = false;
        if (reply.output !== undefined) {
          const fitted = await fit(reply.output);
          if (fitted !== output) {
            output = fitted;
            changed = true;
            // A failed result keeps its error: its message is logged beside the output, so it must carry the
            // hook's text too (a redaction hook that rewrote only the output would leave the original in the log).
            if (error) error = { ...error, message: fitted };
          }
        }
        if (reply.isError !== undefined && reply.isError !== (error !== undefined)) {
          error = reply.isError ? { code: ErrorCode.toolFailed, message: `tool hook ${hook} marked the result an error`, retryable: false } : undefined;
          changed = true;
        }
        if (changed) rewrittenBy.push(hook);
      }
      return { output, ...(error ? { error } : {}), rewrittenBy };
    },
  };
}
