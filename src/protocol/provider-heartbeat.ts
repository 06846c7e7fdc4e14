/**
 * Headers of a provider call's liveness. A caller that wants to notice a provider instance that died while it
 * held the call (killed, out of memory, its connection lost) asks for heartbeats with `heartbeat`; the instance
 * then sends, from the moment it takes the request until its terminal chunk, an empty message carrying `event`
 * to the reply subject every {@link PROVIDER_HEARTBEAT_MS}. These are not chunks: they have no `seq`.
 */
export const ProviderCallHeader = {
  /** `1` on a generate request: send heartbeats to the reply subject while the request runs. */
  heartbeat: 'Agentbus-Heartbeat',
  /** On a heartbeat message: `heartbeat`. Absent on every chunk. */
  event: 'Agentbus-Provider-Event',
} as const;
export type ProviderCallHeader = (typeof ProviderCallHeader)[keyof typeof ProviderCallHeader];

/** The value of {@link ProviderCallHeader.event} on a heartbeat. */
export const PROVIDER_HEARTBEAT_EVENT = 'heartbeat';

/** How often a provider instance sends a heartbeat of a running call it was asked to. */
export const PROVIDER_HEARTBEAT_MS = 1_000;
