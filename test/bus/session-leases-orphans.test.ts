import { describe, expect, it } from 'vitest';
import { jetstream } from '@nats-io/jetstream';
import { Kvm } from '@nats-io/kv';
import { connect } from '@nats-io/transport-node';
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
      expect(await b.orphans()).toEqual({ found: [], complete: true });
      expect(performance.now() - t0).toBeLessThan(1000);

      expect(await a.claim('t', 'released-active', { active: true })).toEqual({ held: true });
      expect(await a.claim('t', 'released-idle', { active: true })).toEqual({ held: true });
      await a.setActive('t', 'released-idle', false);
      expect(await a.claim('t', 'held-active', { active: true })).toEqual({ held: true });
      expect(await b.claim('t', 'own-active', { active: true })).toEqual({ held: true });
      await a.release('t', 'released-active');
      await a.release('t', 'released-idle');
      await a.forget('t', 'forgotten');

      expect(await b.orphans()).toEqual({ found: [{ tenant: 't', sessionId: 'released-active' }], complete: true });
      // Node a sees the same, and not b's active lease (b is alive).
      expect(await a.orphans()).toEqual({ found: [{ tenant: 't', sessionId: 'released-active' }], complete: true });
      // Claimed again, it is nobody's orphan.
      expect(await b.claim('t', 'released-active', { active: true })).toEqual({ held: true });
      expect(await a.orphans()).toEqual({ found: [], complete: true });
    } finally {
      await livenessA.stop();
      await livenessB.stop();
    }
  });
});

// The periodic sweep reads only the markers of leases released with work, written since its last pass.
describe('SessionLeases.released', () => {
  it('finds a session released with work once per marker, until its lease moves on, and then removes the marker', async () => {
    const kvm = new Kvm(jetstream(nats.nc));
    const kv = await kvm.create('LEASES_RELEASED_TEST', { history: 1 });
    const nodes = await kvm.create('NODES_RELEASED_TEST', { history: 1 });
    const livenessA = await startNodeLiveness({ kv: nodes, codec, nodeId: 'node-a', ttlMs: 2000, logger });
    const livenessB = await startNodeLiveness({ kv: nodes, codec, nodeId: 'node-b', ttlMs: 2000, logger });
    const a = createSessionLeases({ kv, codec, liveness: livenessA, logger });
    const b = createSessionLeases({ kv, codec, liveness: livenessB, logger });
    const markerKeys = async () => {
      const keys: string[] = [];
      for await (const key of await kv.keys('released.>')) keys.push(key);
      return keys.sort();
    };
    try {
      // No marker at all: an empty answer, at once.
      const t0 = performance.now();
      expect(await b.released()).toEqual([]);
      expect(performance.now() - t0).toBeLessThan(1000);

      expect(await a.claim('t', 'busy', { active: true })).toEqual({ held: true });
      expect(await a.claim('t', 'idle', { active: true })).toEqual({ held: true });
      await a.setActive('t', 'idle', false);
      expect(await a.claim('t', 'deleted', { active: true })).toEqual({ held: true });
      await a.release('t', 'busy');
      await a.release('t', 'idle');
      await a.release('t', 'deleted');
      // Only releases with work are marked; a lease is not a marker, nor a marker a lease.
      expect(await markerKeys()).toEqual(['released.t.busy', 'released.t.deleted']);
      expect((await b.orphans()).found.map((orphan) => orphan.sessionId).sort()).toEqual(['busy', 'deleted']);
      await b.forget('t', 'deleted');

      expect(await b.released()).toEqual([{ tenant: 't', sessionId: 'busy' }]);
      // Not claimed: found again at the next pass (another node's, too).
      expect(await b.released()).toEqual([{ tenant: 't', sessionId: 'busy' }]);
      expect(await a.released()).toEqual([{ tenant: 't', sessionId: 'busy' }]);
      expect(await b.claim('t', 'busy')).toEqual({ held: true });
      expect(await b.released()).toEqual([]);
      expect(await markerKeys()).toEqual([]);
      expect(await a.released()).toEqual([]);

      // Released with work a second time: marked again, found again.
      await b.setActive('t', 'busy', true);
      await b.release('t', 'busy');
      expect(await a.released()).toEqual([{ tenant: 't', sessionId: 'busy' }]);
    } finally {
      await livenessA.stop();
      await livenessB.stop();
    }
  });

  it('says a full read is not complete when the holder of an active lease could not be judged', async () => {
    const kvm = new Kvm(jetstream(nats.nc));
    const kv = await kvm.create('LEASES_UNSURE_TEST', { history: 1 });
    const nodes = await kvm.create('NODES_UNSURE_TEST', { history: 1 });
    const livenessA = await startNodeLiveness({ kv: nodes, codec, nodeId: 'node-a', ttlMs: 2000, logger });
    const a = createSessionLeases({ kv, codec, liveness: livenessA, logger });
    try {
      await kv.put('t.held-elsewhere', codec.encode({ node: 'node-x', active: true }));
      // node-x has never written a heartbeat: found dead (no recent heartbeat), so its session is an orphan.
      expect(await a.orphans()).toEqual({ found: [{ tenant: 't', sessionId: 'held-elsewhere' }], complete: true });
      // A holder whose heartbeat could not be read counts as alive, and the read says it is not complete, so the
      // runtime reads the bucket again at its next sweep.
      const unsure = createSessionLeases({ kv, codec, liveness: { ...livenessA, isAlive: async () => true, heardFrom: () => false, knows: () => false }, logger });
      expect(await unsure.orphans()).toEqual({ found: [], complete: false });
      // A holder liveness knows but has not heard lately is judged by liveness's own sweep: the read is complete.
      const known = createSessionLeases({ kv, codec, liveness: { ...livenessA, isAlive: async () => true, heardFrom: () => false, knows: () => true }, logger });
      expect(await known.orphans()).toEqual({ found: [], complete: true });
    } finally {
      await livenessA.stop();
    }
  });
});

// What issue #17 asked of the sweep: its cost follows what was released, not how many leases the bucket holds.
describe('the periodic sweep', () => {
  it('costs the same few messages with 0 and with 400 leases in the bucket, and one more per released session', async () => {
    const kvm = new Kvm(jetstream(nats.nc));
    const nodes = await kvm.create('NODES_SWEEP_COST_TEST', { history: 1 });
    const liveness = await startNodeLiveness({ kv: nodes, codec, nodeId: 'node-a', ttlMs: 2000, logger });
    // The sweep on a connection of its own, so its messages are counted apart from the heartbeats.
    const sweeper = await connect({ servers: nats.server.url });
    try {
      const kv = await new Kvm(jetstream(sweeper)).create('LEASES_SWEEP_COST_TEST', { history: 1 });
      const leases = createSessionLeases({ kv, codec, liveness, logger });
      const messagesOf = async (pass: () => Promise<unknown>) => {
        const before = sweeper.stats();
        await pass();
        const after = sweeper.stats();
        return after.inMsgs - before.inMsgs + after.outMsgs - before.outMsgs;
      };
      const empty = await messagesOf(() => leases.released());
      for (let index = 0; index < 400; index += 1) expect(await leases.claim('t', `s${index}`, { active: index % 2 === 0 })).toEqual({ held: true });
      for (let index = 0; index < 200; index += 1) await leases.setActive('t', `s${index}`, false);
      for (let index = 0; index < 200; index += 1) await leases.release('t', `s${index}`);
      await messagesOf(() => leases.released());
      const full = await messagesOf(() => leases.released());
      // A whole read of the bucket, for comparison: it grows with the leases (and their delete markers).
      const whole = await messagesOf(() => leases.orphans());
      // A consumer create and delete (the delete's reply may land after the count): a handful, whatever the bucket holds.
      expect(empty).toBeLessThanOrEqual(6);
      expect(full).toBeLessThanOrEqual(6);
      expect(whole).toBeGreaterThan(400);
      await leases.setActive('t', 's300', true);
      await leases.release('t', 's300');
      const one = await messagesOf(async () => expect(await leases.released()).toEqual([{ tenant: 't', sessionId: 's300' }]));
      // Plus the marker delivered, its flow control, and one lease read.
      expect(one).toBeLessThanOrEqual(16);
    } finally {
      await sweeper.close();
      await liveness.stop();
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
