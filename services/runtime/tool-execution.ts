import { fromPromise } from 'xstate';
import { ErrorCode, LogEventType } from '../../src/protocol/index.ts';
import type { ErrorData } from '../../src/protocol/index.ts';
import type { ExecuteToolsInput, PlannedCall, RequestApprovalInput } from '../../machines/index.ts';
import type { ToolInfo } from './ports.ts';
import { stepTools } from './session-scope.ts';
import type { StepActorDeps } from './session-scope.ts';
import type { SessionServices } from './session-services.ts';
import { toolOutputForLog } from './tool-output.ts';

/** Runs one planned call (or answers it with an error: denied, or a tool nobody serves) and appends its `tool.use` and `tool.result`. */
async function runTool(services: SessionServices, input: ExecuteToolsInput, call: PlannedCall, byName: Map<string, ToolInfo>, signal: AbortSignal): Promise<void> {
  const { config, writer, tenant, sessionId } = services;
  const scope = { turnId: input.turnId, step: input.step };
  const effectId = `${sessionId}:${input.turnId}:${call.id}`;
  const started = services.now();
  await writer.append(LogEventType.toolUse, scope, { toolCallId: call.id, effectId, name: call.name, args: call.args, tier: call.tier });
  let output: string;
  let error: ErrorData | undefined;
  const decision = input.decisions[call.id];
  const info = byName.get(call.name);
  if (decision && !decision.approved) {
    error = { code: ErrorCode.denied, message: `approval denied${decision.reason ? `: ${decision.reason}` : ''}`, retryable: false };
  } else if (!info) {
    const available = [...byName.keys()].sort().join(', ') || 'none';
    error = { code: ErrorCode.unknownTool, message: `unknown tool "${call.name}"; available tools: ${available}`, retryable: false };
  }
  if (error) {
    output = `${error.code}: ${error.message}`;
  } else {
    const timeoutMs = info?.timeoutMs ?? config.toolTimeoutMs;
    const reply = await services.tools.call(
      { v: 1, callId: call.id, effectId, name: call.name, args: call.args, tenant, sessionId, turnId: input.turnId, deadline: services.now() + timeoutMs },
      { signal, timeoutMs },
    );
    if (reply.ok) {
      output = typeof reply.output === 'string' ? reply.output : JSON.stringify(reply.output ?? null);
    } else {
      error = reply.error;
      output = `${reply.error.code}: ${reply.error.message}`;
    }
  }
  const forLog = { scrubber: services.scrubber, maxChars: config.maxToolOutputChars };
  output = await toolOutputForLog(output, forLog);
  // A tool's error message is tool output too: it reaches the log and the model.
  if (error) error = { ...error, message: await toolOutputForLog(error.message, forLog) };
  const result = { toolCallId: call.id, name: call.name, output, isError: error !== undefined, durationMs: services.now() - started };
  // After a cancel, finishTurn closes the call; a late result must not be appended too. Results that
  // finish together are written as one pipelined group.
  await writer.appendUnless(LogEventType.toolResult, scope, error ? { ...result, error } : result, { unless: signal });
}

/**
 * The turn's tool actors: `executeTools` runs a batch of planned calls against the step's tools, appending
 * each call's `tool.use` and `tool.result`; `requestApproval` appends `approval.requested` for a privileged call.
 */
export function createToolActors({ scopeOf, progress }: Pick<StepActorDeps, 'scopeOf' | 'progress'>) {
  const executeTools = fromPromise<void, ExecuteToolsInput>(async ({ input, signal, system }) => {
    const scope = scopeOf(system);
    const { services } = scope;
    const names = input.calls.map((call) => call.name);
    progress(services, input, 'tool_execution', `Executing tools: ${names.join(', ')}`, names);
    const byName = await stepTools(scope, signal);
    await Promise.all(input.calls.map((call) => runTool(services, input, call, byName, signal)));
    signal.throwIfAborted();
  });

  const requestApproval = fromPromise<void, RequestApprovalInput>(async ({ input, system }) => {
    await scopeOf(system).services.writer.append(LogEventType.approvalRequested, { turnId: input.turnId, step: input.step }, {
      toolCallId: input.call.id,
      name: input.call.name,
      args: input.call.args,
    });
  });

  return { executeTools, requestApproval };
}
