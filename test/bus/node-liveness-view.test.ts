import { afterEach, describe, expect, it } from 'vitest';
import { Kvm } from '@nats-io/kv';
import { createCodec } from '../../src/protocol/index.ts';
import { startNodeLiveness } from '../../services/runtime/node/node-liveness.ts';
import type { NodeLiveness } from '../../services/runtime/node/node-liveness.ts';
import { useNatsServer } from '../helpers/nats-fixture.ts';
import { silentLogger } from '../helpers/stack.ts';

// What a runtime node knows of the fleet without asking anyone: the ready nodes, and whether every node's view
// can be taken to be the same (settled). A new session's claim relies on it (see SessionLeases.claim's presume).

const nats = useNatsServer();
const codec = createCodec();
const TTL_MS = 400;
const running: NodeLiveness[] = [];
const sleep = (ms: number) => new Promise((resolve) => setTimeout(resolve, ms));

async function node(nodeId: string, bucket: string, ttlMs = TTL_MS): Promise<NodeLiveness> {
  const kv = await new Kvm(nats.nc).create(bucket, { history: 1 });
  const liveness = await startNodeLiveness({ kv, codec, nodeId, ttlMs, logger: silentLogger() });
  running.push(liveness);
  return liveness;
}

afterEach(async () => {
  for (const liveness of running.splice(0)) await liveness.stop();
});

describe('the fleet view of a runtime node', () => {
  it('counts only ready nodes, and is settled a whole TTL after the last change', async () => {
    const a = await node('view-a', 'NODES_VIEW_1');
    const b = await node('view-b', 'NODES_VIEW_1');
    expect(a.view()).toEqual({ members: [], settled: false });
    a.markReady(true);
    b.markReady(true);
    await expect.poll(() => a.view().members.slice().sort(), { timeout: 3_000 }).toEqual(['view-a', 'view-b']);
    expect(a.view().settled).toBe(false);
    await expect.poll(() => a.view().settled && b.view().settled, { timeout: 5_000 }).toBe(true);
    expect(b.view().members.slice().sort()).toEqual(['view-a', 'view-b']);
    // A node that starts to stop says so: the others drop it at its next heartbeat, and are unsettled again.
    b.markReady(false);
    await expect.poll(() => a.view().members, { timeout: 3_000 }).toEqual(['view-a']);
    expect(a.view().settled).toBe(false);
    await expect.poll(() => a.view().settled, { timeout: 5_000 }).toBe(true);
  });

  it('is unsettled as soon as a node misses two heartbeats, before it is found dead', { timeout: 20_000 }, async () => {
    // A longer TTL here: the bound below is about the TTL, and must hold on a busy machine.
    const ttlMs = 2_000;
    const a = await node('miss-a', 'NODES_VIEW_2', ttlMs);
    a.markReady(true);
    // Another node's heartbeats, written by hand every TTL/4 as a node does, then no more (as a paused process).
    const kv = await new Kvm(nats.nc).open('NODES_VIEW_2');
    const beat = () => kv.put('miss-b', codec.encode({ ttlMs, at: Date.now(), ready: true }));
    await beat();
    const beating = setInterval(() => void beat(), ttlMs / 4);
    try {
      await expect.poll(() => a.view().settled && a.view().members.length === 2, { timeout: 10_000 }).toBe(true);
    } finally {
      clearInterval(beating);
    }
    const silentSince = Date.now();
    await expect.poll(() => a.view().settled, { timeout: 3_000, interval: 10 }).toBe(false);
    // Within the TTL: the view is unsettled once two heartbeats are missed, not only when the node is found dead.
    expect(Date.now() - silentSince).toBeLessThan(ttlMs);
    expect(a.view().members).toContain('miss-b');
  });
});
