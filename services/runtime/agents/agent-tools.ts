import { createHash } from 'node:crypto';
import { LogEventType, SafetyTier } from '../../../src/protocol/index.ts';
import type { LogEvent } from '../../../src/protocol/index.ts';
import type { ToolInfo } from '../ports.ts';
import type { AgentProfile, AgentProfiles } from './profiles.ts';

/** Prefix of the tool that calls a profile as a child session. */
export const AGENT_TOOL_PREFIX = 'agent__';
/** Prefix of the tool that hands the rest of the turn to a profile. */
export const HANDOFF_TOOL_PREFIX = 'handoff__';

/** How long an agent call may take when its profile names no `deadlineMs`: the child turn's own default applies too. */
export const DEFAULT_AGENT_CALL_MS = 600_000;

const TASK_PARAMETERS = {
  type: 'object',
  properties: { task: { type: 'string', description: 'What the agent is to do: everything it needs to know, as it sees nothing else of this conversation.' } },
  required: ['task'],
  additionalProperties: false,
} as const;

const HANDOFF_PARAMETERS = {
  type: 'object',
  properties: { reason: { type: 'string', description: 'Why the rest of this turn goes to that agent.' } },
  additionalProperties: false,
} as const;

/** What a tool name means to the runtime: an agent call, a handoff, or neither (a worker's tool). */
export type AgentToolKind = { readonly kind: 'agent' | 'handoff'; readonly profile: string };

/** The agent tool a name stands for, or undefined for any other tool. */
export function agentToolOf(name: string): AgentToolKind | undefined {
  if (name.startsWith(AGENT_TOOL_PREFIX)) return { kind: 'agent', profile: name.slice(AGENT_TOOL_PREFIX.length) };
  if (name.startsWith(HANDOFF_TOOL_PREFIX)) return { kind: 'handoff', profile: name.slice(HANDOFF_TOOL_PREFIX.length) };
  return undefined;
}

/** Whether a step run as `active` may be offered (or run) the tool `name`: every tool when it has no allow-list. */
export function allowedBy(active: AgentProfile | undefined, name: string): boolean {
  return active?.tools === undefined || active.tools.includes(name);
}

/**
 * The agent tools a step of `tenant` is offered, run as `active` (none: the plain session): `agent__<name>` and
 * `handoff__<name>` for each of the tenant's profiles but `active` itself, filtered by `active`'s allow-list.
 * Both are `side_effecting` (a child may have effects of its own): they run alone, in order.
 */
export function agentTools(profiles: AgentProfiles, tenant: string, active: AgentProfile | undefined): ToolInfo[] {
  const tools: ToolInfo[] = [];
  for (const profile of profiles.list(tenant)) {
    if (profile.name === active?.name) continue;
    if (profile.callable) {
      tools.push({
        name: `${AGENT_TOOL_PREFIX}${profile.name}`,
        description: `Ask the agent "${profile.name}" to do a task and answer with its result. ${profile.description}`,
        parameters: TASK_PARAMETERS,
        tier: SafetyTier.sideEffecting,
        timeoutMs: profile.deadlineMs ?? DEFAULT_AGENT_CALL_MS,
        idempotent: true,
      });
    }
    if (profile.handoff) {
      tools.push({
        name: `${HANDOFF_TOOL_PREFIX}${profile.name}`,
        description: `Hand the rest of this turn over to the agent "${profile.name}", which then answers the user. ${profile.description}`,
        parameters: HANDOFF_PARAMETERS,
        tier: SafetyTier.sideEffecting,
        timeoutMs: 10_000,
        idempotent: true,
      });
    }
  }
  return tools.filter((tool) => allowedBy(active, tool.name));
}

/**
 * The profile a turn runs as now, by name: its prompt's `profile`, replaced by each `turn.handoff` of the turn in
 * log order. Undefined: the plain session (the runtime's system prompt, the turn's model, every tool).
 */
export function activeProfileName(turnEvents: readonly LogEvent[]): string | undefined {
  let name: string | undefined;
  for (const event of turnEvents) {
    if (event.type === LogEventType.userMessage && !event.data.steer) name = event.data.profile;
    else if (event.type === LogEventType.turnHandoff) name = event.data.to;
  }
  return name;
}

/**
 * The child session of one agent call: derived from the call's stable `effectId`, so a parent resumed on another
 * node finds the child it started rather than starting a second one.
 *
 * @example
 * childSessionId('s1:t1:1:call_0'); // 'sub-' + 32 URL-safe characters
 */
export function childSessionId(effectId: string): string {
  return `sub-${createHash('sha256').update(effectId).digest('base64url').slice(0, 32)}`;
}

/** How much sooner than its caller's a child turn's deadline comes. */
export const CHILD_DEADLINE_MARGIN_MS = 1_000;

/** What the calling turn has spent and may still spend, read from its log events. */
export interface TurnBudget {
  readonly maxSteps: number;
  readonly step: number;
  readonly maxCost?: number;
  readonly cost: number;
  readonly deadline?: number;
}

/** The budget of the turn `turnId` so far: its `turn.started` limits and the cost of its calls logged until now. */
export function turnBudget(turnEvents: readonly LogEvent[], step: number): TurnBudget {
  let maxSteps = 1;
  let maxCost: number | undefined;
  let deadline: number | undefined;
  let cost = 0;
  for (const event of turnEvents) {
    if (event.type === LogEventType.turnStarted) {
      maxSteps = event.data.maxSteps;
      maxCost = event.data.maxCost;
      deadline = event.data.deadline;
    } else if (event.type === LogEventType.assistantMessage) cost += event.data.cost;
    else if (event.type === LogEventType.summaryCreated) cost += event.data.cost ?? 0;
    else if (event.type === LogEventType.toolResult) cost += event.data.cost ?? 0;
  }
  return { maxSteps, step, cost, ...(maxCost === undefined ? {} : { maxCost }), ...(deadline === undefined ? {} : { deadline }) };
}

/** The budgets a child turn is prompted with: its profile's, each capped by what the parent turn has left. */
export interface ChildBudget {
  readonly maxSteps: number;
  readonly maxCost?: number;
  /** Milliseconds from the child prompt's acceptance. */
  readonly deadlineMs: number;
}

/**
 * Caps a profile's budgets by the parent's: steps by the parent's steps left (the parent's current one counts as
 * left), cost by its `maxCost` less what it spent, the deadline by its own. Null when the parent has nothing left
 * to give (no cost or no time): the call fails as `budget_exceeded` without starting a child.
 */
export function childBudget(profile: AgentProfile, parent: TurnBudget, now: number, defaultMaxSteps: number, defaultDeadlineMs: number): ChildBudget | null {
  const stepsLeft = Math.max(1, parent.maxSteps - parent.step + 1);
  const maxSteps = Math.min(profile.maxSteps ?? defaultMaxSteps, stepsLeft);
  const costLeft = parent.maxCost === undefined ? undefined : parent.maxCost - parent.cost;
  if (costLeft !== undefined && costLeft <= 0) return null;
  const maxCost = costLeft === undefined ? profile.maxCost : Math.min(profile.maxCost ?? costLeft, costLeft);
  // The child's deadline counts from its prompt's acceptance, a moment later: a margin keeps it inside the caller's,
  // with time left for the caller to read the child's end.
  const timeLeft = parent.deadline === undefined ? undefined : parent.deadline - now - CHILD_DEADLINE_MARGIN_MS;
  if (timeLeft !== undefined && timeLeft <= 0) return null;
  const deadlineMs = Math.floor(Math.min(profile.deadlineMs ?? defaultDeadlineMs, timeLeft ?? Number.POSITIVE_INFINITY));
  if (deadlineMs < 1) return null;
  return { maxSteps, deadlineMs, ...(maxCost === undefined ? {} : { maxCost }) };
}
