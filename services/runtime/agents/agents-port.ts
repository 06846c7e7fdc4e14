import type { AgentCaller } from './agent-calls.ts';
import type { AgentProfiles } from './profiles.ts';

/** What a runtime knows of agent profiles: the tenants' profiles and how a call of one runs. */
export interface AgentsPort {
  readonly profiles: AgentProfiles;
  readonly caller: AgentCaller;
}
