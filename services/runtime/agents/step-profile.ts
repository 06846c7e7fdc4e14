import type { ToolInfo } from '../ports.ts';
import type { SessionServices } from '../turn/session-services.ts';
import { LogEventType } from '../../../src/protocol/index.ts';
import { activeProfileName, agentToolOf, agentTools, allowedBy } from './agent-tools.ts';
import type { AgentCaller } from './agent-calls.ts';
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
export function cancelOpenAgentCalls(services: Pick<SessionServices, 'agents' | 'transcript' | 'tenant' | 'logger'>, turnId: string, reason: string): void {
  const { agents } = services;
  if (!agents) return;
  const open = new Set(services.transcript.openCalls(turnId).filter((call) => agentToolOf(call.name)?.kind === 'agent').map((call) => call.id));
  if (open.size === 0) return;
  for (const event of services.transcript.turnEvents(turnId)) {
    if (event.type === LogEventType.toolUse && open.has(event.data.toolCallId) && event.data.blockedBy === undefined) {
      agents.caller.cancel(services.tenant, event.data.effectId, reason);
    }
  }
}
