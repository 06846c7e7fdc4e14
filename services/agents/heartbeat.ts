import type { AgentIdentity } from './wire.ts';

/** The heartbeat of §8.3, which the `status` endpoint answers too (§8.7). The instance name is in the subject only. */
export interface HeartbeatPayload {
  readonly agent: string;
  readonly owner: string;
  readonly session?: string;
  readonly instance_id: string;
  /** UTC ISO-8601. */
  readonly ts: string;
  readonly interval_s: number;
}

/** Builds the heartbeat (and status) payload of one instance at `now`. Pure. */
export function buildHeartbeat(identity: AgentIdentity & { readonly session?: string | undefined }, instanceId: string, intervalS: number, now: number): HeartbeatPayload {
  return {
    agent: identity.agent,
    owner: identity.owner,
    ...(identity.session === undefined ? {} : { session: identity.session }),
    instance_id: instanceId,
    ts: new Date(now).toISOString(),
    interval_s: intervalS,
  };
}
