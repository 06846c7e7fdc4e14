import { describe, expect, it } from 'vitest';
import { jetstream } from '@nats-io/jetstream';
import { Kvm } from '@nats-io/kv';
import { pino } from 'pino';
import { createSessionLeases } from '../../services/runtime/node/leases.ts';
import { startNodeLiveness } from '../../services/runtime/node/node-liveness.ts';
import { sweepsOrphans } from '../../services/runtime/node/rendezvous.ts';
import { createCodec } from '../../src/protocol/index.ts';
import { useNatsServer } from '../helpers/nats-fixture.ts';

const nats = useNatsServer();
const codec = createCodec();
const logger = pino({ level: 'silent' });

// The orphan sweep reads every lease of the bucket in one pass (values included) instead of a key listing and a
// read per key: what it finds must be what the per-key reads found.
describe('SessionLeases.orphans', () => {
  it('finds leases released active, and not inactive ones, nor active ones a live node holds, nor its own', async () => {
    const kvm = new Kvm(jetstream(nats.nc));
    const kv = await kvm.create('LEASES_ORPHANS_TEST', { history: 1 });
    const nodes = await kvm.create('NODES_ORPHANS_TEST', { history: 1 });
    const livenessA = await startNodeLiveness({ kv: nodes, codec, nodeId: 'node-a', ttlMs: 2000, logger });
    const livenessB = await startNodeLiveness({ kv: nodes, codec, nodeId: 'node-b', ttlMs: 2000, logger });
    const a = createSessionLeases({ kv, codec, liveness: livenessA, logger });
    const b = createSessionLeases({ kv, codec, liveness: livenessB, logger });
    try {
      // An empty bucket answers at once, with nothing.
      const t0 = performance.now();
      expect(await b.orphans()).toEqual([]);
      expect(performance.now() - t0).toBeLessThan(1000);

      expect(await a.claim('t', 'released-active', { active: true })).toEqual({ held: true });
      expect(await a.claim('t', 'released-idle', { active: true })).toEqual({ held: true });
      await a.setActive('t', 'released-idle', false);
      expect(await a.claim('t', 'held-active', { active: true })).toEqual({ held: true });
      expect(await b.claim('t', 'own-active', { active: true })).toEqual({ held: true });
      await a.release('t', 'released-active');
      await a.release('t', 'released-idle');
      await a.forget('t', 'forgotten');

      expect(await b.orphans()).toEqual([{ tenant: 't', sessionId: 'released-active' }]);
      // Node a sees the same, and not b's active lease (b is alive).
      expect(await a.orphans()).toEqual([{ tenant: 't', sessionId: 'released-active' }]);
      // Claimed again, it is nobody's orphan.
      expect(await b.claim('t', 'released-active', { active: true })).toEqual({ held: true });
      expect(await a.orphans()).toEqual([]);
    } finally {
      await livenessA.stop();
      await livenessB.stop();
    }
  });
});

describe('sweepsOrphans', () => {
  it('gives the sweep to one node of a settled fleet, and to every node of an unsettled one', () => {
    const members = ['node-a', 'node-b', 'node-c'];
    const sweepers = members.filter((node) => sweepsOrphans({ members, settled: true }, node));
    expect(sweepers).toHaveLength(1);
    expect(members.every((node) => sweepsOrphans({ members, settled: false }, node))).toBe(true);
    // A node that is not counted (not ready) sweeps only when nobody is.
    expect(sweepsOrphans({ members: [], settled: true }, 'node-z')).toBe(true);
    expect(sweepsOrphans({ members, settled: true }, 'node-z')).toBe(false);
  });
});
