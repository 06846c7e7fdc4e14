import type { ToolInfo } from '../ports.ts';
import type { SessionServices } from '../turn/session-services.ts';
import { LogEventType } from '../../../src/protocol/index.ts';
import { activeProfileName, agentToolOf, agentTools, allowedBy } from './agent-tools.ts';
import type { AgentCaller, ChildSpend } from './agent-calls.ts';
import type { AgentProfile, AgentProfiles } from './profiles.ts';

import type { AgentsPort } from './agents-port.ts';

export type { AgentsPort } from './agents-port.ts';

/** The profile the turn `turnId` of a session runs as now (its prompt's, or the last handoff's), if any. */
export function activeProfile(services: Pick<SessionServices, 'agents' | 'transcript' | 'tenant'>, turnId: string): AgentProfile | undefined {
  if (!services.agents) return undefined;
  const name = activeProfileName(services.transcript.turnEvents(turnId));
  return name === undefined ? undefined : services.agents.profiles.get(services.tenant, name);
}

/**
 * The tools a step of `turnId` is offered: the workers' tools and the tenant's agent tools, both filtered by the
 * active profile's allow-list. Without profiles, the workers' tools as they are.
 */
export function stepToolList(services: Pick<SessionServices, 'agents' | 'transcript' | 'tenant'>, turnId: string | undefined, workerTools: readonly ToolInfo[]): readonly ToolInfo[] {
  if (!services.agents || turnId === undefined) return workerTools;
  const active = activeProfile(services, turnId);
  return [...workerTools.filter((tool) => allowedBy(active, tool.name)), ...agentTools(services.agents.profiles, services.tenant, active)];
}

/**
 * The tools a new turn of `tenant` run as the profile `profileName` (none: the plain session) may be offered at its
 * first step, so a prompt's `forceTool` may name them: the workers' tools and the tenant's agent tools, filtered by
 * that profile's allow-list, as {@link stepToolList} offers them. Without profiles, the workers' tools as they are.
 */
export function promptToolList(agents: AgentsPort | undefined, tenant: string, profileName: string | undefined, workerTools: readonly ToolInfo[]): readonly ToolInfo[] {
  if (!agents) return workerTools;
  const active = profileName === undefined ? undefined : agents.profiles.get(tenant, profileName);
  return [...workerTools.filter((tool) => allowedBy(active, tool.name)), ...agentTools(agents.profiles, tenant, active)];
}

/**
 * Cancels the child sessions of the turn's agent calls still open as it ends (cancelled, past its deadline, failed):
 * cancel flows from caller to child. A turn that merely stops on this node (a drain, a crash) does not end here, and
 * its children run on for the caller resumed elsewhere.
 */
export function cancelOpenAgentCalls(services: Pick<SessionServices, 'agents' | 'transcript' | 'tenant' | 'logger'>, turnId: string, reason: string): OpenAgentCall[] {
  const { agents } = services;
  if (!agents) return [];
  const open = new Set(services.transcript.openCalls(turnId).filter((call) => agentToolOf(call.name)?.kind === 'agent').map((call) => call.id));
  if (open.size === 0) return [];
  const cancelled: OpenAgentCall[] = [];
  for (const event of services.transcript.turnEvents(turnId)) {
    if (event.type === LogEventType.toolUse && open.has(event.data.toolCallId) && event.data.blockedBy === undefined) {
      agents.caller.cancel(services.tenant, event.data.effectId, reason);
      cancelled.push({ toolCallId: event.data.toolCallId, effectId: event.data.effectId });
    }
  }
  return cancelled;
}

/** An agent call left open as its turn ended, whose child was sent a cancel. */
export interface OpenAgentCall {
  readonly toolCallId: string;
  readonly effectId: string;
}

/**
 * What the children of the agent calls a turn left open spent, by tool call id: each child's `turn.ended` when it
 * comes within `waitMs` (they were just cancelled), else what its log shows. A child that cannot be read is logged at
 * warn and left out.
 */
export async function openAgentSpend(
  services: Pick<SessionServices, 'agents' | 'tenant' | 'logger'>,
  calls: readonly OpenAgentCall[],
  waitMs: number,
): Promise<Map<string, ChildSpend>> {
  const spent = new Map<string, ChildSpend>();
  const { agents } = services;
  if (!agents || calls.length === 0) return spent;
  const signal = AbortSignal.timeout(waitMs + OPEN_SPEND_READ_MS);
  await Promise.all(
    calls.map(async (call) => {
      try {
        const child = await agents.caller.spent(services.tenant, call.effectId, { waitMs, signal });
        if (child) spent.set(call.toolCallId, child);
      } catch (err) {
        services.logger.warn({ err, toolCallId: call.toolCallId }, 'what the cancelled agent call spent could not be read; not counted');
      }
    }),
  );
  return spent;
}

/** Time beyond the wait for a child's end to read its log once more. */
const OPEN_SPEND_READ_MS = 2_000;
