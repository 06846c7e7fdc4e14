import { ErrorCode, abortReason, toErrorData } from '../errors.ts';
import type { Logger } from '../logging.ts';
import type { ToolCallReply, ToolCallRequest } from '../protocol/index.ts';
import type { AnyToolDefinition } from './define-tool.ts';
import { errorReply } from './execute-tool-call.ts';
import type { ResultLedger } from './result-ledger.ts';
import type { Scrubber } from '../scrub/index.ts';

/**
 * The answer to a repeat of a recorded tool's call (`attempt` 2 and up), before anything runs: the recorded
 * reply (with this attempt's `callId`) when there is one; `interrupted` when there is none and the tool is not
 * idempotent (an earlier attempt may have had its effect); undefined when the tool may run.
 */
export async function answerRepeat(
  ledger: ResultLedger,
  tool: AnyToolDefinition,
  request: ToolCallRequest,
  options: { signal: AbortSignal; logger: Logger },
): Promise<ToolCallReply | undefined> {
  let recorded;
  try {
    recorded = await ledger.lookup(request, request.effectId, { signal: options.signal });
  } catch (error) {
    if (options.signal.aborted) return errorReply(request.callId, toErrorData(abortReason(options.signal)));
    const message = `${tool.name} was not run: its earlier attempt's outcome could not be read (${error instanceof Error ? error.message : String(error)})`;
    return errorReply(request.callId, { code: ErrorCode.internal, message, retryable: true });
  }
  if (recorded) {
    options.logger.debug({ tool: tool.name, effectId: request.effectId }, 'answered a repeat from the result ledger');
    return { ...recorded.reply, callId: request.callId };
  }
  if (tool.idempotent) return undefined;
  const message = `an earlier attempt of this call to ${tool.name} may have run and recorded no outcome; it is not run again because ${tool.name} is not idempotent`;
  return errorReply(request.callId, { code: ErrorCode.interrupted, message, retryable: false });
}

/**
 * Codes of runs the tool did not settle itself: cut off, what it fronts was down (an MCP server restarting), or
 * suspended on a question to the user (the call is made again with the answer: that run settles it).
 */
const NOT_SETTLED: ReadonlySet<string> = new Set([ErrorCode.cancelled, ErrorCode.timeout, ErrorCode.unavailable, ErrorCode.inputRequired]);

/** True when a reply is an outcome the tool settled itself, one the ledger keeps. */
export function isSettled(reply: ToolCallReply): boolean {
  return reply.ok || !NOT_SETTLED.has(reply.error.code);
}

/**
 * A reply as the ledger keeps it: its output (as text, as the runtime shows it to the model) and its error
 * message scrubbed of secrets, like everything the bus stores.
 */
export async function scrubbedForLedger(reply: ToolCallReply, scrubber: Pick<Scrubber, 'scrub'>): Promise<ToolCallReply> {
  if (!reply.ok) return { ...reply, error: { ...reply.error, message: await scrubber.scrub(reply.error.message) } };
  const text = typeof reply.output === 'string' ? reply.output : JSON.stringify(reply.output ?? null);
  return { ...reply, output: await scrubber.scrub(text) };
}

/**
 * Records the outcome of a call that ran (already {@link scrubbedForLedger}, and {@link isSettled}). The write is
 * sent before this returns, so a reply sent next on the same connection reaches the server after it; the promise
 * settles with the server's acknowledgement (a refused or unacknowledged write is logged: a repeat of that call then
 * ends `interrupted`). A run cut off (a cancel, a stopping worker, a timeout, what it fronts going down) may or may
 * not have had its effect, and is left unrecorded so that a repeat runs again only if the tool is idempotent.
 */
export function recordOutcome(
  ledger: ResultLedger,
  tool: AnyToolDefinition,
  request: ToolCallRequest,
  reply: ToolCallReply,
  options: { now: () => number; workerId: string | undefined; logger: Logger },
): Promise<void> {
  const warn = (err: unknown) =>
    options.logger.warn({ err, tool: tool.name, effectId: request.effectId }, 'could not record a call outcome in the result ledger: a repeat of it will end interrupted');
  try {
    const entry = { v: 1 as const, effectId: request.effectId, tool: tool.name, reply, at: options.now(), ...(options.workerId ? { workerId: options.workerId } : {}) };
    return ledger.record(request, entry, {}).catch(warn);
  } catch (err) {
    // An outcome that cannot be written at all (an invalid tenant or session id, a reply the codec refuses).
    warn(err);
    return Promise.resolve();
  }
}
