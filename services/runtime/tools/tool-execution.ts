import { fromPromise } from 'xstate';
import { ErrorCode, LogEventType, SafetyTier, ZERO_USAGE, addUsage } from '../../../src/protocol/index.ts';
import type { ErrorData, Usage } from '../../../src/protocol/index.ts';
import type { ExecuteToolsInput, ExecuteToolsOutput, HumanAnswer, PlannedCall, RequestApprovalInput, SuspendedCall } from '../../../machines/index.ts';
import { agentToolOf, childSessionId } from '../agents/agent-tools.ts';
import { runAgentTool } from '../agents/run-agent-tool.ts';
import type { AgentToolResult } from '../agents/run-agent-tool.ts';
import type { ToolInfo } from '../ports.ts';
import { stepTools } from '../turn/session-scope.ts';
import { deadlineOf } from '../limits/limited-provider.ts';
import { callToolWithRecovery, withinDeadline } from './tool-call-attempts.ts';
import type { StepActorDeps } from '../turn/session-scope.ts';
import type { SessionServices } from '../turn/session-services.ts';
import { fitToolOutput, runAfterHooks, runBeforeHooks } from './tool-call-hooks.ts';
import type { HookedResult } from './tool-hooks.ts';
import { awaitHuman } from './human-wait.ts';

/** A call the turn's deadline cut short (its worker stopped it there): said as the turn's end says it. */
const PAST_TURN_DEADLINE: ErrorData = { code: ErrorCode.deadlineExceeded, message: 'the turn passed its deadline before this call finished; the call was cancelled', retryable: false };

/** The result of a call that failed: the error, and the output the model is shown for it. */
function failed(error: ErrorData): HookedResult {
  return { output: `${error.code}: ${error.message}`, error };
}

/**
 * The tool a call goes to: the step's list, or, for a tool whose workers are away now (a rolling restart), what they
 * last announced, when the call was planned for that tier or the tool is read-only (an unplanned call is batched as
 * a read). A tool no worker ever announced has none: it fails at once as unknown.
 */
function toolOf(services: SessionServices, call: PlannedCall, byName: Map<string, ToolInfo>): ToolInfo | undefined {
  const listed = byName.get(call.name);
  if (listed) return listed;
  const known = services.tools.announced?.(call.name);
  return known && (known.tier === call.tier || known.tier === SafetyTier.readOnly) ? known : undefined;
}

/** What one call left besides its events: a question it waits on, or what an agent call's child turn spent. */
interface RanCall {
  readonly suspended?: SuspendedCall;
  readonly spent?: { readonly usage: Usage; readonly cost: number };
}

/**
 * Runs one planned call (or answers it with an error: denied, blocked by a before-hook, or a tool nobody serves),
 * with the deployment's tool hooks around it, and appends its `tool.use` and `tool.result`.
 */
async function runTool(services: SessionServices, input: ExecuteToolsInput, planned: PlannedCall, byName: Map<string, ToolInfo>, signal: AbortSignal): Promise<RanCall> {
  const { config, writer, tenant, sessionId } = services;
  const scope = { turnId: input.turnId, step: input.step };
  const decision = input.decisions[planned.id];
  // Approved with edited arguments: the call is the edited one from here on (the before-hooks see it), unless it
  // went out already (`sent`: a resumed or re-asked call keeps the arguments it went out with).
  const call = decision?.args !== undefined && !planned.sent ? { ...planned, args: decision.args } : planned;
  // A call made again after the user answered its question: its `tool.use` is in the log already.
  const again = (call.inputs?.length ?? 0) > 0 || call.inputTimedOut !== undefined;
  // The step is part of it: models that reuse ids (`call_0` in every response) give two steps' calls one id, and a
  // repeat of one must not be answered with the other's recorded outcome. A resumed call that went out keeps the id
  // it went out under, which an older runtime built without the step.
  const effectId = call.effectId ?? `${sessionId}:${input.turnId}:${input.step}:${call.id}`;
  const started = services.now();
  const hooked = await runBeforeHooks(services, { input, call, effectId, byName }, signal);
  // A blocked call is logged as such, so that a turn resumed from the log knows it never went out.
  const blockedBy = hooked.blockedBy === undefined ? {} : { blockedBy: hooked.blockedBy };
  // An agent call names its child session up front (its id derives from the effectId), so watchers can follow it.
  const child = agentToolOf(call.name)?.kind === 'agent' ? { childSessionId: childSessionId(effectId) } : {};
  const use = { toolCallId: call.id, effectId, name: call.name, args: hooked.args, tier: call.tier, ...hooked.logged, ...blockedBy, ...child, argsFinal: true };
  if (!again) await writer.append(LogEventType.toolUse, scope, use);
  const info = toolOf(services, call, byName);
  let settled: HookedResult;
  let scrubbedBy: 'worker' | undefined;
  let agentCall: AgentToolResult | undefined;
  const agentTool = info !== undefined && !hooked.blocked && !(decision && !decision.approved) ? agentToolOf(call.name) : undefined;
  if (decision?.respond !== undefined) {
    // Answered in the tool's place: the text is the call's result, and the tool does not run.
    settled = { output: decision.respond };
  } else if (call.inputTimedOut) {
    const message = `nobody answered the question of ${call.name} (${call.inputTimedOut.requestId}) before its deadline; the call did not go on`;
    settled = failed({ code: ErrorCode.timeout, message, retryable: false });
  } else if (agentTool) {
    // An agent profile's tool: a child session (agent__) or a handoff, run by the runtime itself.
    agentCall = await runAgentTool(services, { turnId: input.turnId, step: input.step, toolCallId: call.id, effectId, args: hooked.args }, agentTool, signal);
    settled = agentCall.error ? { output: agentCall.output, error: agentCall.error } : { output: agentCall.output };
  } else if (decision && !decision.approved) {
    settled = failed({ code: ErrorCode.denied, message: `approval denied${decision.reason ? `: ${decision.reason}` : ''}`, retryable: false });
  } else if (!info) {
    const available = [...byName.keys()].sort().join(', ') || 'none';
    settled = failed({ code: ErrorCode.unknownTool, message: `unknown tool "${call.name}"; available tools: ${available}`, retryable: false });
  } else if (hooked.blocked) {
    settled = hooked.blocked;
  } else {
    // Never past the turn's deadline: the worker stops the call by then even if the turn's cancel does not reach it.
    const { deadline: notAfter } = deadlineOf(services.transcript, input);
    const timeoutMs = withinDeadline(info.timeoutMs ?? config.toolTimeoutMs, notAfter, services.now());
    const reply = await callToolWithRecovery(
      services,
      {
        v: 1,
        effectId,
        name: call.name,
        args: hooked.args,
        tenant,
        sessionId,
        turnId: input.turnId,
        deadline: services.now() + timeoutMs,
        ...(call.inputs?.length ? { inputs: call.inputs } : {}),
      },
      info,
      { turnId: input.turnId, step: input.step, toolCallId: call.id, ...(call.resumed ? { firstAttempt: 2 } : {}) },
      { signal, timeoutMs, ...(notAfter === undefined ? {} : { notAfter }) },
    );
    if (!reply.ok && reply.error.code === ErrorCode.inputRequired && reply.inputRequest && !signal.aborted) {
      return { suspended: await suspend(services, { call, effectId, args: hooked.args, logged: hooked.logged, question: reply.inputRequest }, scope) };
    }
    // Cut short by the turn's deadline rather than the tool's own timeout: said as the turn's end says it.
    if (reply.ok) settled = { output: typeof reply.output === 'string' ? reply.output : JSON.stringify(reply.output ?? null) };
    else if (reply.error.code === ErrorCode.timeout && notAfter !== undefined && services.now() >= notAfter) settled = failed(PAST_TURN_DEADLINE);
    else settled = failed(reply.error);
    if (reply.outputScrubbed) scrubbedBy = 'worker';
  }
  // A tool's error message is tool output too: it reaches the log and the model.
  settled = {
    output: await fitToolOutput(services, settled.output, scrubbedBy),
    ...(settled.error ? { error: { ...settled.error, message: await fitToolOutput(services, settled.error.message) } } : {}),
  };
  const { output, error, logged } = await runAfterHooks(services, hooked, settled, signal);
  const spent = agentCall?.cost === undefined ? {} : { cost: agentCall.cost, ...(agentCall.usage ? { usage: agentCall.usage } : {}) };
  const answered = agentCall?.child ? { child: agentCall.child } : {};
  const result = { toolCallId: call.id, name: call.name, output, isError: error !== undefined, durationMs: services.now() - started, ...logged, ...answered, ...spent };
  // After a cancel, finishTurn closes the call; a late result must not be appended too. Results that
  // finish together are written as one pipelined group.
  await writer.appendUnless(LogEventType.toolResult, scope, error ? { ...result, error } : result, { unless: signal });
  return agentCall?.cost === undefined ? {} : { spent: { cost: agentCall.cost, usage: agentCall.usage ?? ZERO_USAGE } };
}

/**
 * A call whose worker asked the user something (`input_required`): logs `tool.input_requested` (its question scrubbed
 * and cut like tool output, with its deadline) and leaves the call open, suspended; the turn waits for the answer in
 * AwaitingApproval and then makes the call again with it, under the same effectId.
 */
async function suspend(
  services: SessionServices,
  target: { call: PlannedCall; effectId: string; args: unknown; logged: { readonly argsRewrittenBy?: readonly string[] }; question: { question: string; schema?: Record<string, unknown> } },
  scope: { turnId: string; step: number },
): Promise<SuspendedCall> {
  const { call, effectId, args, logged, question } = target;
  const requestId = `${call.id}:${(call.inputs?.length ?? 0) + 1}`;
  const text = await fitToolOutput(services, question.question);
  const asking = { requestId, question: text, ...(question.schema ? { schema: question.schema } : {}) };
  const deadline = services.now() + services.config.approvalTimeoutMs;
  await services.writer.append(LogEventType.toolInputRequested, scope, { toolCallId: call.id, name: call.name, ...asking, deadline });
  return { id: call.id, asking, effectId, sent: logged.argsRewrittenBy ? { args, argsRewrittenBy: logged.argsRewrittenBy } : { args } };
}

/**
 * The turn's tool actors: `executeTools` runs a batch of planned calls against the step's tools, appending
 * each call's `tool.use` and `tool.result`; `requestApproval` appends `approval.requested` for a privileged call.
 */
export function createToolActors({ scopeOf, progress }: Pick<StepActorDeps, 'scopeOf' | 'progress'>) {
  const executeTools = fromPromise<ExecuteToolsOutput | void, ExecuteToolsInput>(async ({ input, signal, system }) => {
    const scope = scopeOf(system);
    const { services } = scope;
    const names = input.calls.map((call) => call.name);
    progress(services, input, 'tool_execution', `Executing tools: ${names.join(', ')}`, names);
    const byName = await stepTools(scope, signal, input.turnId);
    const ran = await Promise.all(input.calls.map((call) => runTool(services, input, call, byName, signal)));
    signal.throwIfAborted();
    const suspended = ran.flatMap((each) => (each.suspended ? [each.suspended] : []));
    // Agent calls' child turns: their cost is this turn's too.
    let spent: { usage: Usage; cost: number } | undefined;
    for (const { spent: each } of ran) if (each) spent = { usage: addUsage(spent?.usage ?? ZERO_USAGE, each.usage), cost: (spent?.cost ?? 0) + each.cost };
    return { ...(suspended.length > 0 ? { suspended } : {}), ...(spent ?? {}) };
  });

  const requestApproval = fromPromise<HumanAnswer | void, RequestApprovalInput>(({ input, signal, system }) => awaitHuman(scopeOf(system).services, input, signal));

  return { executeTools, requestApproval };
}
