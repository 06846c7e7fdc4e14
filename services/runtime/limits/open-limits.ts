import type { NatsConnection } from '@nats-io/nats-core';
import { Kvm } from '@nats-io/kv';
import type { Codec } from '../../../src/protocol/index.ts';
import type { RuntimeConfig } from '../config.ts';
import { createFleetLimits } from './fleet-limits.ts';
import type { FleetLimits } from './fleet-limits.ts';
import { createLimitCells, kvCellStore } from './limit-cells.ts';

/**
 * How long an untouched key stays in the limits bucket: past a month, so a month's spend outlives its last write
 * until the month is over. Windows and periods reuse their keys, so the bucket holds a few keys per tenant and model.
 */
export const LIMITS_BUCKET_TTL_MS = 35 * 24 * 60 * 60_000;

/**
 * Opens (or makes) the limits bucket and the node's {@link FleetLimits} over it. A reservation whose call is never
 * settled (its node died) stops counting after the longest a call may run, the longest rate wait, and a minute.
 */
export async function openFleetLimits(
  nc: NatsConnection,
  codec: Codec,
  bucket: string,
  config: Pick<RuntimeConfig, 'nodeId' | 'providerTimeoutMs' | 'limits'>,
  replicas: number,
  now: () => number,
): Promise<FleetLimits> {
  const kv = await new Kvm(nc).create(bucket, { history: 1, ttl: LIMITS_BUCKET_TTL_MS, replicas, description: 'agentbus: fleet-wide provider rate and tenant spend counters' });
  const limits = config.limits ?? { rates: [], spend: [], rateMaxWaitMs: 0 };
  return createFleetLimits({
    cells: createLimitCells({ store: kvCellStore(kv), codec }),
    config: limits,
    nodeId: config.nodeId,
    now,
    holdMs: config.providerTimeoutMs + limits.rateMaxWaitMs + 60_000,
  });
}
