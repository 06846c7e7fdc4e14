import { describe, expect, it } from 'vitest';
import { streamNames } from '../../src/protocol/index.ts';
import { SNAPSHOT_BUCKET } from '../../services/memory/snapshots.ts';
import { STATE_BUCKET } from '../../services/memory/state-store.ts';

describe('stream and bucket names', () => {
  it('derive every stream and bucket from the prefix, so two prefixes share none (memory state and snapshots too)', () => {
    const ours = streamNames('agentbus');
    const theirs = streamNames('staging');
    expect(ours).toEqual({ log: 'AGENTBUS_LOG', live: 'AGENTBUS_LIVE', leases: 'AGENTBUS_LEASES', nodes: 'AGENTBUS_NODES', tombstones: 'AGENTBUS_TOMBSTONES', state: 'AGENTBUS_STATE', memory: 'AGENTBUS_MEMORY', ledger: 'AGENTBUS_LEDGER', limits: 'AGENTBUS_LIMITS' });
    for (const [kind, name] of Object.entries(theirs)) expect(name, kind).not.toBe(ours[kind as keyof typeof ours]);
    // The default prefix keeps the names the shipped NATS configuration grants.
    expect([STATE_BUCKET, SNAPSHOT_BUCKET]).toEqual(['AGENTBUS_STATE', 'AGENTBUS_MEMORY']);
  });
});
