import { mkdtemp, rm } from 'node:fs/promises';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { connect } from '@nats-io/transport-node';
import type { NatsConnection } from '@nats-io/nats-core';
import { jetstreamManager } from '@nats-io/jetstream';
import { connectBus } from '../../src/bus/connect.ts';
import { ensureStreams } from '../../src/bus/streams.ts';
import { freePort, startNatsServerProcess } from '../../src/nats-server.ts';
import type { NatsServerProcess } from '../../src/nats-server.ts';
import { startProviderService } from '../../services/provider/index.ts';
import { startRuntimeService } from '../../services/runtime/index.ts';
import { startToolsService } from '../../services/tools/index.ts';
import { checkLogs, readLogs } from '../helpers/log-checker.ts';
import { collectEvents, requestJson, silentLogger } from '../helpers/stack.ts';

// A three-server NATS cluster on loopback, the streams and buckets at three replicas (AGENTBUS_REPLICAS=3):
// the server leading the session log is killed in the middle of a turn, and the sessions go on with
// nothing lost. On Debian's nats-server 2.9.10, as on newer servers.

interface ClusterServer {
  readonly name: string;
  readonly process: NatsServerProcess;
  readonly dir: string;
  stopped: boolean;
}

const servers: ClusterServer[] = [];
const connections: NatsConnection[] = [];
let urls: string[] = [];
let client: NatsConnection;
let stops: Array<() => Promise<void>> = [];

async function open(): Promise<NatsConnection> {
  const nc = await connect({ servers: urls, maxReconnectAttempts: -1, reconnectTimeWait: 250 });
  connections.push(nc);
  return nc;
}

beforeAll(async () => {
  const ports = await Promise.all([0, 1, 2].map(async () => ({ client: await freePort(), cluster: await freePort() })));
  urls = ports.map((port) => `nats://127.0.0.1:${port.client}`);
  await Promise.all(
    ports.map(async (port, index) => {
      const dir = await mkdtemp(join(tmpdir(), `agentbus-cluster-${index}-`));
      const routes = ports.filter((_, other) => other !== index).map((other) => `"nats-route://127.0.0.1:${other.cluster}"`);
      const process = await startNatsServerProcess({
        storeDir: dir,
        port: port.client,
        config: `server_name: n${index}\ncluster {\n  name: agentbus\n  listen: "127.0.0.1:${port.cluster}"\n  routes: [${routes.join(', ')}]\n}\n`,
      });
      servers[index] = { name: `n${index}`, process, dir, stopped: false };
    }),
  );
  client = await open();
  // JetStream in a cluster answers once its meta leader is elected.
  for (const deadline = Date.now() + 30_000; ; ) {
    const ready = await jetstreamManager(client).then(async (jsm) => (await jsm.getAccountInfo(), true)).catch(() => false);
    if (ready) break;
    if (Date.now() > deadline) throw new Error('the cluster elected no JetStream meta leader within 30 s');
    await new Promise((resolve) => setTimeout(resolve, 250));
  }
  const provider = await startProviderService({
    nc: await open(),
    logger: silentLogger(),
    script: { responses: [{ text: 'before the kill' }, { text: 'This answer streams slowly, so that a server dies while it is written to the log.', delayMs: 40, chunkSize: 2 }, { text: 'after the kill' }] },
  });
  const tools = await startToolsService({ nc: await open(), logger: silentLogger() });
  // The runtime connects as its main does, with NATS_URL listing the cluster's servers comma-separated.
  const runtimeConnection = await connectBus({ servers: urls.join(','), name: 'agentbus-runtime', logger: silentLogger() });
  connections.push(runtimeConnection);
  const runtime = await startRuntimeService({ nc: runtimeConnection, logger: silentLogger(), config: { replicas: 3, leaseTtlMs: 3000 } });
  stops = [() => runtime.stop(), () => tools.stop(), () => provider.stop()];
}, 90_000);

afterAll(async () => {
  for (const stop of stops) await stop().catch(() => undefined);
  for (const nc of connections) await nc.close().catch(() => undefined);
  for (const server of servers) {
    if (!server) continue;
    if (!server.stopped) await server.process.stop();
    await rm(server.dir, { recursive: true, force: true });
  }
});

describe('a three-server NATS cluster with R3 streams and buckets', () => {
  it('keeps every session going when the server leading the log dies mid-turn', async () => {
    const jsm = await jetstreamManager(client);
    for (const stream of ['AGENTBUS_LOG', 'AGENTBUS_LIVE', 'KV_AGENTBUS_LEASES', 'KV_AGENTBUS_NODES', 'KV_AGENTBUS_TOMBSTONES']) {
      expect((await jsm.streams.info(stream)).config.num_replicas, stream).toBe(3);
    }
    // A process that ensures the streams without AGENTBUS_REPLICAS (a node missing the variable) leaves them at 3.
    await ensureStreams(jsm, { prefix: 'agentbus' });
    expect((await jsm.streams.info('AGENTBUS_LOG')).config.num_replicas).toBe(3);
    const sessions = ['cluster-1', 'cluster-2'];
    const watchers = sessions.map((sessionId) => collectEvents(client, 'acme', sessionId));
    for (const sessionId of sessions) expect(await requestJson(client, `agentbus.acme.sessions.${sessionId}.prompt`, { text: 'one' })).toMatchObject({ accepted: true });
    await Promise.all(watchers.map((watcher) => watcher.until((seen) => seen.some((event) => event.type === 'turn.ended'), 15_000)));

    // A turn streams; the log's leader dies in the middle of it.
    expect(await requestJson(client, 'agentbus.acme.sessions.cluster-1.prompt', { text: 'two' })).toMatchObject({ accepted: true });
    await watchers[0]!.until((seen) => seen.filter((event) => event.type === 'assistant.delta').length >= 5, 10_000);
    const leader = (await jsm.streams.info('AGENTBUS_LOG')).cluster?.leader;
    const victim = servers.find((server) => server.name === leader);
    expect(victim, `leader ${leader}`).toBeDefined();
    await victim!.process.stop();
    victim!.stopped = true;

    await watchers[0]!.until((seen) => seen.filter((event) => event.type === 'turn.ended').length === 2, 30_000);
    expect(watchers[0]!.events.filter((event) => event.type === 'turn.ended').at(-1)).toMatchObject({ data: { reason: 'yielded' } });
    // And the other session, and a new one, go on on the two servers left.
    for (const sessionId of ['cluster-2', 'cluster-3']) {
      const reply = await requestJson(client, `agentbus.acme.sessions.${sessionId}.prompt`, { text: 'three' }, 15_000);
      expect(reply).toMatchObject({ accepted: true });
    }
    await watchers[1]!.until((seen) => seen.filter((event) => event.type === 'turn.ended').length === 2, 15_000);
    expect(await jsm.streams.info('AGENTBUS_LOG').then((info) => info.cluster?.leader)).not.toBe(leader);

    const figures = checkLogs(await readLogs(client, 'acme', sessions));
    expect(figures).toMatchObject({ promptsWithoutOneEnd: 0, duplicateIds: 0, toolUsesWithoutOneResult: 0, stepGaps: 0 });
    // Nothing lost: every event a watcher saw logged is in the log read back from the servers left.
    const logged = await readLogs(client, 'acme', sessions);
    for (const [index, watcher] of watchers.entries()) {
      const seen = watcher.events.filter((event) => !('live' in event) && ['session.created', 'user.message', 'assistant.message', 'turn.ended'].includes(event.type)).map((event) => event.id);
      expect(logged[index]!.map((event) => event.id)).toEqual(expect.arrayContaining(seen));
      watcher.stop();
    }
  }, 180_000);
});
