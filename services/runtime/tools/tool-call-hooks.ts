import type { ExecuteToolsInput, PlannedCall } from '../../../machines/index.ts';
import type { ToolInfo } from '../ports.ts';
import type { SessionServices } from '../turn/session-services.ts';
import type { HookedCall, HookedResult } from './tool-hooks.ts';
import { toolOutputForLog } from './tool-output.ts';

/** What the before-hooks decided for one call of `runTool`. */
export interface CallHooks {
  /** The arguments to send to the worker, and to log in `tool.use`. */
  readonly args: unknown;
  /** Extra `tool.use` fields: `argsRewrittenBy`, the hooks that replaced the arguments, when any did. */
  readonly logged: { readonly argsRewrittenBy?: readonly string[] };
  /** The call's result when a hook blocked it: the call is sent to no worker. */
  readonly blocked?: HookedResult;
  /** The hook that blocked the call. */
  readonly blockedBy?: string;
  /** The call as after-hooks see it; set when the call goes to a worker and after-hooks are configured. */
  readonly after?: HookedCall;
}

/** A call's result after the after-hooks, and its extra `tool.result` fields. */
export interface HookedCallResult extends HookedResult {
  /** `blockedBy` (the hook that blocked the call) and `outputRewrittenBy` (hooks that rewrote the result), when set. */
  readonly logged: { readonly blockedBy?: string; readonly outputRewrittenBy?: readonly string[] };
}

/** A call as it goes out when no before-hook is asked: as it went out before its turn was resumed, else the model's. */
function noHooks(call: PlannedCall): CallHooks {
  const { sent } = call;
  if (!sent) return { args: call.args, logged: {} };
  return { args: sent.args, logged: sent.argsRewrittenBy ? { argsRewrittenBy: sent.argsRewrittenBy } : {} };
}

/**
 * Runs the deployment's before-hooks on a call that is about to be sent: not on a call that was denied approval
 * or names a tool nobody serves (those fail without reaching a worker), not on a resumed call that went out before
 * its node died (it goes out as it did: a repeat of that call, which the ledger may answer, whatever the hooks
 * would say now), and without a bus round trip when no hooks are configured.
 */
export async function runBeforeHooks(
  services: Pick<SessionServices, 'hooks' | 'tenant' | 'sessionId'>,
  target: { input: ExecuteToolsInput; call: PlannedCall; effectId: string; byName: ReadonlyMap<string, ToolInfo> },
  signal: AbortSignal,
): Promise<CallHooks> {
  const { hooks, tenant, sessionId } = services;
  const { input, call, effectId, byName } = target;
  if (!hooks || !byName.has(call.name) || input.decisions[call.id]?.approved === false) return noHooks(call);
  const { before, after } = hooks.config;
  if (before.length === 0 && after.length === 0) return noHooks(call);
  const hooked: HookedCall = { v: 1, callId: call.id, effectId, name: call.name, args: call.args, tier: call.tier, tenant, sessionId, turnId: input.turnId };
  if (call.sent) {
    const sent = noHooks(call);
    return { ...sent, ...(after.length > 0 ? { after: { ...hooked, args: sent.args } } : {}) };
  }
  const decided = await hooks.before(hooked, { signal });
  const logged = decided.rewrittenBy.length > 0 ? { argsRewrittenBy: decided.rewrittenBy } : {};
  if (decided.blocked) {
    const { by, ...blocked } = decided.blocked;
    return { args: decided.args, logged, blocked, blockedBy: by };
  }
  return { args: decided.args, logged, ...(after.length > 0 ? { after: { ...hooked, args: decided.args } } : {}) };
}

/**
 * Runs the after-hooks on the result of a call that went to a worker (its output already scrubbed and cut to
 * `maxToolOutputChars`); a rewritten output is scrubbed and cut again. Any other result passes as it is.
 */
export async function runAfterHooks(services: Pick<SessionServices, 'hooks' | 'scrubber' | 'config'>, hooked: CallHooks, result: HookedResult, signal: AbortSignal): Promise<HookedCallResult> {
  if (hooked.blockedBy !== undefined) return { ...result, logged: { blockedBy: hooked.blockedBy } };
  if (!services.hooks || !hooked.after) return { ...result, logged: {} };
  const { rewrittenBy, ...rewritten } = await services.hooks.after(hooked.after, result, { signal, fit: (output) => fitToolOutput(services, output) });
  return { ...rewritten, logged: rewrittenBy.length > 0 ? { outputRewrittenBy: rewrittenBy } : {} };
}

/** Scrubs an output (the fast pass alone when its worker scrubbed it) and cuts it to `maxToolOutputChars`, as `runTool` does with every tool's. */
export function fitToolOutput(services: Pick<SessionServices, 'scrubber' | 'config'>, output: string, scrubbedBy?: 'worker'): Promise<string> {
  return toolOutputForLog(output, { scrubber: services.scrubber, maxChars: services.config.maxToolOutputChars, ...(scrubbedBy ? { scrubbedBy } : {}) });
}
