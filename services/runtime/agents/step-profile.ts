import type { ToolInfo } from '../ports.ts';
import type { SessionServices } from '../turn/session-services.ts';
import { activeProfileName, agentTools, allowedBy } from './agent-tools.ts';
import type { AgentCaller } from './agent-calls.ts';
import type { AgentProfile, AgentProfiles } from './profiles.ts';

/** What a runtime knows of agent profiles: the tenants' profiles and how a call of one runs. */
export interface AgentsPort {
  readonly profiles: AgentProfiles;
  readonly caller: AgentCaller;
}

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
