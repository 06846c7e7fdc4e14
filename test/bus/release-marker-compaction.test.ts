import { describe, expect, it } from 'vitest';
import { jetstream, jetstreamManager } from '@nats-io/jetstream';
import { Kvm } from '@nats-io/kv';
import { connect } from '@nats-io/transport-node';
import { pino } from 'pino';
import { createSessionLeases } from '../../services/runtime/node/leases.ts';
import { startNodeLiveness } from '../../services/runtime/node/node-liveness.ts';
import { markerListing, markerRemoval } from '../../services/runtime/node/marker-stream.ts';
import { createReleasedMarkers } from '../../services/runtime/node/released-markers.ts';
import { createCodec } from '../../src/protocol/index.ts';
import { useNatsServer } from '../helpers/nats-fixture.ts';

// A user that may do everything but purge a stream, as a server config written before markers were purged; a
// connection without credentials is admin.
const nats = useNatsServer({
  config: `no_auth_user: admin
authorization {
  users = [
    { user: admin, password: admin }
    { user: nopurge, password: nopurge, permissions: { publish: { allow: [">"], deny: ["$JS.API.STREAM.PURGE.>"] }, subscribe: { allow: [">"] } } }
  ]
}`,
});
const codec = createCodec();
const logger = pino({ level: 'silent' });

/** Messages the bucket's stream holds on marker subjects (`released.>`), whatever their operation (puts and deletes). */
async function markerMessages(bucket: string): Promise<Record<string, number>> {
  const jsm = await jetstreamManager(nats.nc);
  const info = await jsm.streams.info(`KV_${bucket}`, { subjects_filter: `$KV.${bucket}.released.>` });
  return Object.fromEntries(Object.entries(info.state.subjects ?? {}).map(([subject, count]) => [subject.slice(`$KV.${bucket}.`.length), count]));
}

async function twoNodes(bucket: string, connection = nats.nc) {
  const kvm = new Kvm(jetstream(connection));
  const kv = await kvm.create(bucket, { history: 1 });
  const nodes = await new Kvm(jetstream(nats.nc)).create(`${bucket}_NODES`, { history: 1 });
  const livenessA = await startNodeLiveness({ kv: nodes, codec, nodeId: 'node-a', ttlMs: 2000, logger });
  const livenessB = await startNodeLiveness({ kv: nodes, codec, nodeId: 'node-b', ttlMs: 2000, logger });
  return {
    kv,
    livenessA,
    livenessB,
    a: createSessionLeases({ kv, codec, liveness: livenessA, logger }),
    b: createSessionLeases({ kv, codec, liveness: livenessB, logger }),
    stop: async () => {
      await livenessA.stop();
      await livenessB.stop();
    },
  };
}

describe('release markers', () => {
  it('are removed without a delete marker left behind once their lease moved on', async () => {
    const bucket = 'LEASES_COMPACT_TEST';
    const { kv, a, b, stop } = await twoNodes(bucket);
    try {
      for (const sessionId of ['one', 'two', 'three']) {
        expect(await a.claim('t', sessionId, { active: true })).toEqual({ held: true });
        await a.release('t', sessionId);
      }
      expect(await markerMessages(bucket)).toEqual({ 'released.t.one': 1, 'released.t.two': 1, 'released.t.three': 1 });
      expect((await b.released()).map((orphan) => orphan.sessionId).sort()).toEqual(['one', 'three', 'two']);
      // Node a listed them too, and misses b's removals: it finds the leases moved on, and drops them all the same.
      expect((await a.released()).length).toBe(3);
      for (const sessionId of ['one', 'two', 'three']) expect(await b.claim('t', sessionId)).toEqual({ held: true });
      expect(await b.released()).toEqual([]);
      expect(await markerMessages(bucket)).toEqual({});
      expect(await a.released()).toEqual([]);
      expect(await markerMessages(bucket)).toEqual({});
      // Released with work again: marked again, and found.
      await b.setActive('t', 'two', true);
      await b.release('t', 'two');
      expect(await a.released()).toEqual([{ tenant: 't', sessionId: 'two' }]);
    } finally {
      await stop();
    }
  });

  it('are never confused with the leases of a tenant named "released"', async () => {
    const bucket = 'LEASES_TENANT_RELEASED_TEST';
    const { kv, a, b, stop } = await twoNodes(bucket);
    try {
      // `released.victim` is a lease (two tokens); `released.released.gone` is the marker of its sibling's release.
      expect(await a.claim('released', 'victim', { active: true })).toEqual({ held: true });
      expect(await a.claim('released', 'gone', { active: true })).toEqual({ held: true });
      await a.release('released', 'gone');
      expect(await b.released()).toEqual([{ tenant: 'released', sessionId: 'gone' }]);
      expect((await kv.get('released.victim'))?.operation).toBe('PUT');
      expect(await b.claim('released', 'victim')).toEqual({ held: false, owner: 'node-a' });
      // The whole read finds the lease too: a session of that tenant is adopted when its node is gone.
      await a.release('released', 'victim');
      expect((await b.orphans()).found).toContainEqual({ tenant: 'released', sessionId: 'victim' });
    } finally {
      await stop();
    }
  });

  it('keeps a newer marker of the same session when an older one is removed', async () => {
    const kv = await new Kvm(jetstream(nats.nc)).create('LEASES_NEWER_TEST', { history: 1 });
    const older = await kv.put('released.t.s', codec.encode({ lease: 1 }));
    const newer = await kv.put('released.t.s', codec.encode({ lease: 5 }));
    await markerRemoval(kv)('t.s', older);
    expect((await kv.get('released.t.s'))?.revision).toBe(newer);
    await markerRemoval(kv)('t.s', newer);
    expect(await kv.get('released.t.s')).toBeNull();
    expect(await markerMessages('LEASES_NEWER_TEST')).toEqual({});
  });

  it('purges the delete markers an earlier version left, a bounded number per pass', async () => {
    const bucket = 'LEASES_LEFTOVER_TEST';
    const { kv, b, stop } = await twoNodes(bucket);
    try {
      // What earlier versions did: a marker deleted by compare-and-set, its delete marker left in the stream.
      for (let index = 0; index < 70; index++) {
        const revision = await kv.put(`released.t.s${index}`, codec.encode({ lease: 1 }));
        await kv.delete(`released.t.s${index}`, { previousSeq: revision });
      }
      expect(Object.keys(await markerMessages(bucket))).toHaveLength(70);
      expect(await b.released()).toEqual([]);
      expect(Object.keys(await markerMessages(bucket))).toHaveLength(70 - 64);
      expect(await b.released()).toEqual([]);
      expect(await markerMessages(bucket)).toEqual({});
    } finally {
      await stop();
    }
  });

  it('are deleted as before when the server does not let the node purge the stream', async () => {
    const bucket = 'LEASES_NOPURGE_TEST';
    const limited = await connect({ servers: nats.server.url, user: 'nopurge', pass: 'nopurge' });
    const { kv, a, livenessB, stop } = await twoNodes(bucket, limited);
    try {
      const markers = createReleasedMarkers({ kv, codec, list: markerListing(kv, codec, 2000), remove: markerRemoval(kv), logger, opTimeoutMs: 2000 });
      const b = createSessionLeases({ kv, codec, liveness: livenessB, logger, markers });
      expect(await a.claim('t', 'busy', { active: true })).toEqual({ held: true });
      await a.release('t', 'busy');
      expect(await b.released()).toEqual([{ tenant: 't', sessionId: 'busy' }]);
      expect(await b.claim('t', 'busy')).toEqual({ held: true });
      expect(await b.released()).toEqual([]);
      // Removed, by a delete: its delete marker stays, and is not kept to purge.
      expect(await kv.get('released.t.busy').then((entry) => entry?.operation)).toBe('DEL');
      expect(await markerMessages(bucket)).toEqual({ 'released.t.busy': 1 });
      expect(markers.size()).toEqual({ listed: 0, unwritten: 0, leftovers: 0 });
    } finally {
      await stop();
      await limited.close();
    }
  });
});
