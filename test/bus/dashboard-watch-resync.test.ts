import net from 'node:net';
import { describe, expect, it } from 'vitest';
import { jetstream } from '@nats-io/jetstream';
import { Kvm } from '@nats-io/kv';
import { connect } from '@nats-io/transport-node';
import { pino } from 'pino';
import { createSessionLeases } from '../../services/runtime/node/leases.ts';
import { startNodeLiveness } from '../../services/runtime/node/node-liveness.ts';
import { createLeaseDeleteMarkers, deleteMarkerRemoval } from '../../services/runtime/node/lease-delete-markers.ts';
import { createLeasesWatcher } from '../../services/dashboard/leases-watcher.ts';
import { watchBucket } from '../../services/dashboard/bucket-watch.ts';
import { createCodec } from '../../src/protocol/index.ts';
import { useNatsServer } from '../helpers/nats-fixture.ts';
import { freePort } from '../helpers/nats-server.ts';

const nats = useNatsServer();
const codec = createCodec();
const logger = pino({ level: 'silent' });
const sleep = (ms: number) => new Promise((resolve) => setTimeout(resolve, ms));

/** A TCP proxy to the server that can be cut and opened again: the dashboard's connection goes through it. */
function cuttableProxy(port: number, target: { host: string; port: number }) {
  const sockets = new Set<net.Socket>();
  let server: net.Server | undefined;
  const open = () =>
    new Promise<void>((resolve) => {
      server = net.createServer((client) => {
        const upstream = net.connect(target.port, target.host);
        sockets.add(client);
        sockets.add(upstream);
        client.pipe(upstream);
        upstream.pipe(client);
        const end = () => {
          client.destroy();
          upstream.destroy();
        };
        for (const socket of [client, upstream]) socket.on('error', end).on('close', end);
      });
      server.listen(port, '127.0.0.1', () => resolve());
    });
  const close = () =>
    new Promise<void>((resolve) => {
      for (const socket of sockets) socket.destroy();
      sockets.clear();
      if (server) server.close(() => resolve());
      else resolve();
    });
  return { open, close };
}

async function until(check: () => boolean, ms = 10_000): Promise<void> {
  const end = Date.now() + ms;
  while (!check()) {
    if (Date.now() > end) throw new Error('condition not met in time');
    await sleep(50);
  }
}

describe('the dashboard watch across a lost connection', () => {
  // The runtime compacts a released lease's delete marker a minute after writing it. A watch whose connection was
  // down meanwhile resumes after the last message it got and never hears of the release: it must start over.
  it('drops a lease released and compacted while it was cut off', async () => {
    const kv = await new Kvm(jetstream(nats.nc)).create('RESYNC_LEASES', { history: 1 });
    const nodes = await new Kvm(jetstream(nats.nc)).create('RESYNC_NODES', { history: 1 });
    const clock = { now: Date.now() };
    const liveness = await startNodeLiveness({ kv: nodes, codec, nodeId: 'node-a', ttlMs: 2000, logger });
    const deleteMarkers = createLeaseDeleteMarkers({ remove: deleteMarkerRemoval(kv), logger, opTimeoutMs: 2000, now: () => clock.now });
    const leases = createSessionLeases({ kv, codec, liveness, logger, deleteMarkers });
    const target = new URL(nats.server.url.replace('nats://', 'http://'));
    const port = await freePort();
    const proxy = cuttableProxy(port, { host: target.hostname, port: Number(target.port) });
    await proxy.open();
    const dashboard = await connect({ servers: `nats://127.0.0.1:${port}`, reconnectTimeWait: 200, maxReconnectAttempts: -1 });
    const watcher = createLeasesWatcher({ nc: dashboard, bucket: 'RESYNC_LEASES', nodesBucket: 'RESYNC_NODES', codec, logger, retryMs: 50 });
    try {
      expect(await leases.claim('t', 's1')).toEqual({ held: true });
      expect(await leases.claim('t', 's2')).toEqual({ held: true });
      expect(await leases.claim('t', 'other')).toEqual({ held: true });
      await until(() => watcher.lease('t', 's1')?.node === 'node-a' && watcher.lease('t', 's2')?.node === 'node-a');

      await proxy.close();
      await sleep(300);
      await leases.release('t', 's1');
      await leases.release('t', 's2');
      clock.now += 61_000;
      await leases.retryMarkers();
      // Nothing is left of the releases in the stream.
      expect(await kv.get('t.s1')).toBeNull();
      // A later write, so the resumed watch has something past the gap either way.
      await leases.setActive('t', 'other', true);
      await proxy.open();

      await until(() => watcher.lease('t', 'other')?.active === true);
      await until(() => watcher.lease('t', 's1') === undefined && watcher.lease('t', 's2') === undefined, 5_000);
      expect(watcher.lease('t', 'other')?.node).toBe('node-a');
    } finally {
      watcher.stop();
      await dashboard.close();
      await proxy.close();
      await liveness.stop();
    }
  }, 30_000);

  it('leaves nothing behind once stopped: no status listener on the connection, no entry delivered after', async () => {
    const kv = await new Kvm(jetstream(nats.nc)).create('RESYNC_STOP', { history: 1 });
    await Promise.all(Array.from({ length: 500 }, (_, i) => kv.put(`k${i}`, 'x')));
    // nats.js keeps a connection's status listeners here.
    const listeners = () => (nats.nc as unknown as { protocol: { listeners: unknown[] } }).protocol.listeners.length;
    const before = listeners();
    let stopped = false;
    let afterStop = 0;
    let watch: { stop(): void } | undefined;
    await new Promise<void>((resolve) => {
      let puts = 0;
      watch = watchBucket({
        nc: nats.nc,
        bucket: 'RESYNC_STOP',
        logger,
        retryMs: 50,
        onPut: () => {
          if (stopped) afterStop += 1;
          puts += 1;
          if (puts === 10) {
            stopped = true;
            watch!.stop();
            resolve();
          }
        },
        onRemove: () => undefined,
      });
    });
    await sleep(300);
    expect(afterStop).toBe(0);
    expect(listeners()).toBe(before);
  });
});
