import { ErrorCode } from '../../../src/errors.ts';
import { LogEventType } from '../../../src/protocol/index.ts';
import type { ErrorData } from '../../../src/protocol/index.ts';
import type { SessionServices } from '../turn/session-services.ts';
import { activeProfileName, childBudget, turnBudget } from './agent-tools.ts';
import type { AgentToolKind } from './agent-tools.ts';
import type { AgentCallResult } from './agent-calls.ts';

/** The outcome of an agent tool: its output (or failure) and, for an agent call, the child and what it cost. */
export type AgentToolResult = AgentCallResult;

/** One call of an agent tool, as ToolExecution runs it. */
export interface AgentToolCall {
  readonly turnId: string;
  readonly step: number;
  readonly toolCallId: string;
  readonly effectId: string;
  readonly args: unknown;
}

/** How deep agent calls nest: a child of a child of … at most this many sessions below the first caller. */
export const MAX_AGENT_DEPTH = 4;

/** Slack past the child's deadline: the child ends itself then, and its `turn.ended` has to be read back. */
const DEADLINE_SLACK_MS = 30_000;

const failure = (code: string, message: string): AgentToolResult => {
  const error: ErrorData = { code, message, retryable: false };
  return { output: `${code}: ${message}`, error };
};

/**
 * Runs an agent profile's tool for a turn. `handoff__<name>` appends `turn.handoff` (the following steps run as
 * that profile) and answers at once. `agent__<name>` starts a child session run as the profile, with the budgets
 * the calling turn has left, and answers with the child's final text (its failure as an error result). The
 * profile must be the session's tenant's: another tenant's name is an unknown tool.
 */
export async function runAgentTool(services: SessionServices, call: AgentToolCall, tool: AgentToolKind, signal: AbortSignal): Promise<AgentToolResult> {
  const { agents, tenant, sessionId } = services;
  const profile = agents?.profiles.get(tenant, tool.profile);
  if (!agents || !profile) return failure(ErrorCode.unknownTool, `no agent profile "${tool.profile}" in this tenant`);
  const turnEvents = services.transcript.turnEvents(call.turnId);
  if (tool.kind === 'handoff') {
    const from = activeProfileName(turnEvents);
    await services.writer.append(LogEventType.turnHandoff, { turnId: call.turnId, step: call.step }, { toolCallId: call.toolCallId, to: profile.name, ...(from === undefined ? {} : { from }) });
    return { output: `The rest of this turn is handed to the agent "${profile.name}": its instructions and tools apply from the next step.` };
  }
  const task = typeof call.args === 'object' && call.args !== null ? (call.args as { task?: unknown }).task : undefined;
  if (typeof task !== 'string' || task.trim() === '') return failure(ErrorCode.invalidArguments, 'task: a non-empty string is required');
  // Agents calling agents calling agents… end somewhere: a profile is never offered to itself, and a chain is at most
  // MAX_AGENT_DEPTH sessions below the first caller.
  const created = services.transcript.events.find((event) => event.type === LogEventType.sessionCreated);
  const ownDepth = created?.type === LogEventType.sessionCreated && created.data.parent ? (created.data.parent.depth ?? 1) : 0;
  if (ownDepth + 1 > MAX_AGENT_DEPTH) return failure(ErrorCode.budgetExceeded, `agent calls nest at most ${MAX_AGENT_DEPTH} deep; this session is ${ownDepth} deep`);
  const budget = childBudget(profile, turnBudget(turnEvents, call.step), services.now(), services.config.maxSteps, services.config.turnTimeoutMs);
  if (!budget) return failure(ErrorCode.budgetExceeded, 'the calling turn has no cost or time left to give an agent');
  const waitMs = budget.deadlineMs + DEADLINE_SLACK_MS;
  const timeout = AbortSignal.timeout(waitMs);
  try {
    return await agents.caller.call(
      { tenant, profile, task, budget, parent: { sessionId, turnId: call.turnId, toolCallId: call.toolCallId, effectId: call.effectId, depth: ownDepth + 1 } },
      { signal: AbortSignal.any([signal, timeout]) },
    );
  } catch (err) {
    if (signal.aborted || !timeout.aborted) throw err;
    agents.caller.cancel(tenant, call.effectId, `the calling turn gave up on it after ${waitMs} ms`);
    return failure(ErrorCode.timeout, `the agent "${profile.name}" did not end its turn within ${waitMs} ms`);
  }
}
