import { describe, expect, it } from 'vitest';
import { jetstream, jetstreamManager } from '@nats-io/jetstream';
import { Kvm } from '@nats-io/kv';
import { connect } from '@nats-io/transport-node';
import type { NatsConnection } from '@nats-io/nats-core';
import { pino } from 'pino';
import { createSessionLeases } from '../../services/runtime/node/leases.ts';
import type { SessionLeases } from '../../services/runtime/node/leases.ts';
import { startNodeLiveness } from '../../services/runtime/node/node-liveness.ts';
import { createLeaseDeleteMarkers, deleteMarkerRemoval } from '../../services/runtime/node/lease-delete-markers.ts';
import { createLeasesWatcher } from '../../services/dashboard/leases-watcher.ts';
import { createCodec } from '../../src/protocol/index.ts';
import type { Logger } from '../../src/logging.ts';
import { captureLogs } from '../helpers/captured-logs.ts';
import { useNatsServer } from '../helpers/nats-fixture.ts';

// A lease released idle is deleted (its watchers see the release), and its delete marker purged from the stream
// later, up to its own sequence: what a fleet passivates must not pile up in the bucket, and no newer claim may go.
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
const silent = pino({ level: 'silent' });

/** Messages the bucket's stream holds on lease subjects (`<tenant>.<sessionId>`), by key, and the stream's bytes. */
async function leaseMessages(bucket: string): Promise<{ subjects: Record<string, number>; bytes: number }> {
  const jsm = await jetstreamManager(nats.nc);
  const info = await jsm.streams.info(`KV_${bucket}`, { subjects_filter: `$KV.${bucket}.*.*` });
  const subjects = Object.fromEntries(Object.entries(info.state.subjects ?? {}).map(([subject, count]) => [subject.slice(`$KV.${bucket}.`.length), count]));
  return { subjects, bytes: info.state.bytes };
}

/** Two nodes over one leases bucket; `clock` drives when their delete markers are due (a minute after writing). */
async function twoNodes(bucket: string, options: { connection?: NatsConnection; logger?: Logger } = {}) {
  const logger = options.logger ?? silent;
  const kv = await new Kvm(jetstream(options.connection ?? nats.nc)).create(bucket, { history: 1 });
  const nodes = await new Kvm(jetstream(nats.nc)).create(`${bucket}_NODES`, { history: 1 });
  // Found markers carry the server's time of writing: the clock starts at this machine's.
  const clock = { now: Date.now() };
  const node = async (nodeId: string) => {
    const liveness = await startNodeLiveness({ kv: nodes, codec, nodeId, ttlMs: 2000, logger });
    const deleteMarkers = createLeaseDeleteMarkers({ remove: deleteMarkerRemoval(kv), logger, opTimeoutMs: 2000, now: () => clock.now });
    return { liveness, deleteMarkers, leases: createSessionLeases({ kv, codec, liveness, logger, deleteMarkers }) };
  };
  const a = await node('node-a');
  const b = await node('node-b');
  return {
    kv,
    clock,
    a,
    b,
    stop: async () => {
      await a.liveness.stop();
      await b.liveness.stop();
    },
  };
}

const sessions = (count: number) => Array.from({ length: count }, (_, index) => `s${index}`);

async function releaseIdle(leases: SessionLeases, ids: string[]): Promise<void> {
  for (const sessionId of ids) {
    expect(await leases.claim('t', sessionId)).toEqual({ held: true });
    await leases.release('t', sessionId);
  }
}

describe('lease delete markers', () => {
  it('leave no message in the stream once compacted, after the bucket watchers saw the release', async () => {
    const bucket = 'DELMARK_RELEASE_TEST';
    const { kv, clock, a, b, stop } = await twoNodes(bucket);
    const watcher = createLeasesWatcher({ nc: nats.nc, bucket, nodesBucket: `${bucket}_NODES`, codec, logger: silent, retryMs: 50 });
    try {
      const ids = sessions(40);
      for (const sessionId of ids) expect(await a.leases.claim('t', sessionId)).toEqual({ held: true });
      await expect.poll(() => watcher.lease('t', 's39')?.node, { timeout: 5_000 }).toBe('node-a');
      const held = await leaseMessages(bucket);
      for (const sessionId of ids) await a.leases.release('t', sessionId);
      // The dashboard drops the held leases on their deletes.
      await expect.poll(() => ids.filter((sessionId) => watcher.lease('t', sessionId) !== undefined), { timeout: 5_000 }).toEqual([]);
      const deleted = await leaseMessages(bucket);
      expect(Object.keys(deleted.subjects)).toHaveLength(40);
      // Not due yet: the markers stay for the watchers that were away.
      await a.leases.retryMarkers();
      expect(Object.keys((await leaseMessages(bucket)).subjects)).toHaveLength(40);
      clock.now += 60_000;
      await a.leases.retryMarkers();
      const compacted = await leaseMessages(bucket);
      expect(compacted.subjects).toEqual({});
      expect(compacted.bytes).toBe(0);
      expect(a.deleteMarkers.size()).toEqual({ own: 0, found: 0 });
      // A delete marker cost about what the lease did (some 135 B a session here), for good; now nothing.
      expect(deleted.bytes / 40).toBeGreaterThan(held.bytes / 40 - 10);
      // Claimed again, from nothing: one write, and the session is the claimer's.
      expect(await b.leases.claim('t', 's7')).toEqual({ held: true });
      expect(codec.decode((await kv.get('t.s7'))!.value)).toEqual({ node: 'node-b', active: false });
      expect(await a.leases.claim('t', 's7')).toEqual({ held: false, owner: 'node-b' });
    } finally {
      watcher.stop();
      await stop();
    }
  });

  it('never remove a newer claim by another node, written before or while the compaction runs', async () => {
    const bucket = 'DELMARK_RACE_TEST';
    const { kv, clock, a, b, stop } = await twoNodes(bucket);
    try {
      const ids = sessions(30);
      await releaseIdle(a.leases, ids);
      clock.now += 60_000;
      // Claimed before the compaction (the first ten) and along with it (the rest).
      for (const sessionId of ids.slice(0, 10)) expect(await b.leases.claim('t', sessionId)).toEqual({ held: true });
      const [, ...claims] = await Promise.all([a.leases.retryMarkers(), ...ids.slice(10).map((sessionId) => b.leases.claim('t', sessionId))]);
      expect(claims).toEqual(ids.slice(10).map(() => ({ held: true })));
      for (const sessionId of ids) {
        const entry = await kv.get(`t.${sessionId}`);
        expect(entry?.operation).toBe('PUT');
        expect(codec.decode(entry!.value)).toEqual({ node: 'node-b', active: false });
      }
      expect(Object.values((await leaseMessages(bucket)).subjects)).toEqual(ids.map(() => 1));
      // Node b's writes go on by compare-and-set on its revision: nothing it holds moved under it.
      await b.leases.setActive('t', 's3', true);
      await b.leases.setActive('t', 's23', true);
      expect(codec.decode((await kv.get('t.s23'))!.value)).toEqual({ node: 'node-b', active: true });
      expect(await a.leases.claim('t', 's3')).toEqual({ held: false, owner: 'node-b' });
    } finally {
      await stop();
    }
  });

  it('of other nodes and earlier versions are found by the full read and compacted a bounded number per pass', async () => {
    const bucket = 'DELMARK_LEFTOVER_TEST';
    const { kv, clock, a, b, stop } = await twoNodes(bucket);
    try {
      // Node a released these and stopped before compacting; the others an earlier version deleted with kv.delete.
      await releaseIdle(a.leases, sessions(20));
      for (const sessionId of sessions(70).slice(20)) {
        const revision = await kv.create(`t.${sessionId}`, codec.encode({ node: 'old', active: false }));
        await kv.delete(`t.${sessionId}`, { previousSeq: revision });
      }
      // An active lease released with work is a lease, not a delete marker: it stays.
      expect(await a.leases.claim('t', 'busy', { active: true })).toEqual({ held: true });
      await a.leases.release('t', 'busy');
      expect(Object.keys((await leaseMessages(bucket)).subjects)).toHaveLength(71);
      expect((await b.leases.orphans()).found).toEqual([{ tenant: 't', sessionId: 'busy' }]);
      expect(b.deleteMarkers.size()).toEqual({ own: 0, found: 70 });
      await b.leases.retryMarkers();
      expect(Object.keys((await leaseMessages(bucket)).subjects)).toHaveLength(71);
      // Due a minute after the server wrote them (this test ran a little since the clock was read).
      clock.now += 70_000;
      await b.leases.retryMarkers();
      expect(Object.keys((await leaseMessages(bucket)).subjects)).toHaveLength(71 - 64);
      await b.leases.retryMarkers();
      expect((await leaseMessages(bucket)).subjects).toEqual({ 't.busy': 1 });
      // Node a's own pass after them purges nothing more, and removes nothing written since.
      expect(await b.leases.claim('t', 's0')).toEqual({ held: true });
      await a.leases.retryMarkers();
      expect((await leaseMessages(bucket)).subjects).toEqual({ 't.busy': 1, 't.s0': 1 });
    } finally {
      await stop();
    }
  });

  it("of a deleted session (forget) are compacted too, after the watchers saw the lease go", async () => {
    const bucket = 'DELMARK_FORGET_TEST';
    const { kv, clock, a, b, stop } = await twoNodes(bucket);
    const watch = await kv.watch({ key: 't.*' });
    const seen: string[] = [];
    void (async () => {
      for await (const entry of watch) seen.push(`${entry.key} ${entry.operation}`);
    })();
    try {
      expect(await a.leases.claim('t', 'gone', { active: true })).toEqual({ held: true });
      await a.leases.forget('t', 'gone');
      // Forgotten by a node that does not hold it.
      expect(await a.leases.claim('t', 'other')).toEqual({ held: true });
      await b.leases.forget('t', 'other');
      await expect.poll(() => seen, { timeout: 5_000 }).toEqual(['t.gone PUT', 't.gone PURGE', 't.other PUT', 't.other PURGE']);
      clock.now += 60_000;
      await a.leases.retryMarkers();
      await b.leases.retryMarkers();
      expect((await leaseMessages(bucket)).subjects).toEqual({});
      expect((await b.leases.orphans()).found).toEqual([]);
      expect(await b.leases.claim('t', 'gone')).toEqual({ held: true });
    } finally {
      watch.stop();
      await stop();
    }
  });

  it('stay, and are warned of once, when the server does not let the node purge the stream', async () => {
    const bucket = 'DELMARK_NOPURGE_TEST';
    const limited = await connect({ servers: nats.server.url, user: 'nopurge', pass: 'nopurge' });
    const { logger, lines } = captureLogs('warn');
    const { kv, clock, a, b, stop } = await twoNodes(bucket, { connection: limited, logger });
    try {
      await releaseIdle(a.leases, sessions(20));
      clock.now += 60_000;
      await a.leases.retryMarkers();
      expect(lines.filter((line) => /cannot be purged/.test(String(line.msg)))).toHaveLength(1);
      expect(Object.keys((await leaseMessages(bucket)).subjects)).toHaveLength(20);
      expect(a.deleteMarkers.size()).toEqual({ own: 0, found: 0 });
      // Releases and claims work as before.
      await releaseIdle(a.leases, ['late']);
      expect(a.deleteMarkers.size()).toEqual({ own: 0, found: 0 });
      expect(await b.leases.claim('t', 's4')).toEqual({ held: true });
      expect((await kv.get('t.late'))?.operation).toBe('DEL');
    } finally {
      await stop();
      await limited.close();
    }
  });
});
