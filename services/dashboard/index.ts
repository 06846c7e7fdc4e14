import type { AddressInfo } from 'node:net';
import { fileURLToPath } from 'node:url';
import { jetstream, jetstreamManager } from '@nats-io/jetstream';
import type { NatsConnection } from '@nats-io/nats-core';
import { createSessionLog } from '../../src/bus/session-log.ts';
import { InvalidInputError } from '../../src/errors.ts';
import type { Logger } from '../../src/logging.ts';
import { isLoopbackAddress } from '../../src/service/http-basics.ts';
import { createCodec, createSubjects, streamNames } from '../../src/protocol/index.ts';
import type { AgentEvent } from '../../src/protocol/index.ts';
import { sessionMachine, turnMachine } from '../../machines/index.ts';
import { layoutMachine, machineGraph, toSvg } from '../../src/viz/index.ts';
import { createBusWatcher } from './bus-watcher.ts';
import type { DashboardConfig } from './config.ts';
import { traceLinks } from './trace-links.ts';
import { createEventHub } from './event-hub.ts';
import type { EventHub } from './event-hub.ts';
import { createFleet } from './fleet.ts';
import { createDashboardHttpServer } from './http-server.ts';
import { createLeasesWatcher } from './leases-watcher.ts';
import { pathOf } from './replay.ts';
import { createSessionReader } from './session-reader.ts';
import { createForkSession, parseForkBody } from './session-fork.ts';
import { createWorkersPoller } from './workers.ts';
import { watchBucket } from './bucket-watch.ts';

export { readDashboardConfig, parsePort, DEFAULT_DASHBOARD_PORT } from './config.ts';
export type { DashboardConfig } from './config.ts';
export { createFleet, endState } from './fleet.ts';
export type { Fleet, FleetSnapshot, TurnRow } from './fleet.ts';
export { createEventHub } from './event-hub.ts';
export type { EventHub, EventSink, HubStats } from './event-hub.ts';
export { pathOf } from './replay.ts';
export type { PathStep } from './replay.ts';

/** Options of {@link startDashboardService}. */
export interface DashboardServiceOptions extends DashboardConfig {
  readonly nc: NatsConnection;
  readonly logger: Logger;
  /** Subject prefix; default `agentbus`. */
  readonly prefix?: string;
  /** How often `$SRV` is polled; default 3 s. */
  readonly workersIntervalMs?: number;
  /** How often queued events go to the browsers; default 200 ms. */
  readonly flushMs?: number;
  readonly signal?: AbortSignal;
}

/** A running dashboard. */
export interface DashboardService {
  /** `http://host:port/`, the port the server got. */
  readonly url: string;
  readonly port: number;
  readonly hub: EventHub;
  /** Stops the web server and the bus watches; the connection stays open. */
  stop(): Promise<void>;
}

const STATIC_DIR = fileURLToPath(new URL('./static/', import.meta.url));

/**
 * Starts the dashboard on an open connection: watches every session's events, the leases bucket and
 * `$SRV`, and serves the page. It only reads the bus.
 *
 * @example
 * const dashboard = await startDashboardService({ nc, logger, host: '127.0.0.1', port: 4280 });
 * console.log(dashboard.url);
 */
export async function startDashboardService(options: DashboardServiceOptions): Promise<DashboardService> {
  options.signal?.throwIfAborted();
  const logger = options.logger.child({ service: 'dashboard' });
  const subjects = createSubjects(options.prefix);
  const names = streamNames(options.prefix);
  const codec = createCodec();
  const js = jetstream(options.nc);
  const jsm = await jetstreamManager(options.nc);
  const log = createSessionLog({ nc: options.nc, js, subjects, codec, stream: names.log, logger });
  const reader = createSessionReader({ log, js, jsm, subjects, codec, streams: names, logger });
  const forkSession = createForkSession({ nc: options.nc, codec, subjects });

  const machines = new Map<string, { svg: string; json: unknown }>();
  for (const [name, machine] of [
    ['turn', turnMachine],
    ['session', sessionMachine],
  ] as const) {
    const graph = machineGraph(machine);
    const layout = await layoutMachine(graph, options.signal ? { signal: options.signal } : {});
    machines.set(name, { svg: toSvg(layout, { idPrefix: name }), json: { graph, layout } });
  }

  const fleet = createFleet();
  const workers = createWorkersPoller({ nc: options.nc, codec, logger, ...(options.workersIntervalMs ? { intervalMs: options.workersIntervalMs } : {}) });
  const leases = createLeasesWatcher({
    nc: options.nc,
    bucket: names.leases,
    nodesBucket: names.nodes,
    codec,
    logger,
    onChange: (lease) => fleet.setNode(lease.tenant, lease.sessionId, lease.node === '' ? undefined : lease.node),
  });
  // A deleted session leaves the view: its tombstone is the one sign every delete leaves (the runtime writes it first).
  const tombstones = watchBucket({
    nc: options.nc,
    bucket: names.tombstones,
    logger,
    retryMs: 2000,
    onPut: (entry) => {
      const dot = entry.key.indexOf('.');
      if (dot > 0) fleet.forget(entry.key.slice(0, dot), entry.key.slice(dot + 1));
    },
    onRemove: () => undefined,
  });
  const workersView = () => ({ services: workers.services(), nodes: leases.nodes() });
  // The view changes only when what it shows does: node heartbeats come several times a second and change
  // nothing shown, while a node that goes silent leaves it with no event at all. So it is compared as shown.
  let workersVersion = 0;
  let workersShown = '';
  const hub = createEventHub(
    {
      fleet: () => {
        // The snapshot first: dropping silent turns moves the version.
        const value = fleet.snapshot();
        return { version: fleet.version, value };
      },
      workers: () => {
        const value = workersView();
        const shown = JSON.stringify(value);
        if (shown !== workersShown) {
          workersShown = shown;
          workersVersion += 1;
        }
        return { version: workersVersion, value };
      },
    },
    options.flushMs ? { flushMs: options.flushMs } : {},
  );
  const watcher = createBusWatcher({
    nc: options.nc,
    subjects,
    codec,
    logger,
    // Deltas change nothing but the text a browser following the session shows.
    wants: (tenant, sessionId, live) => live !== 'assistant.delta' || hub.follows(`${tenant}/${sessionId}`),
    onEvent: (event: AgentEvent) => {
      fleet.apply(event);
      hub.publish(event);
      if (event.turnId !== undefined && fleet.needsBackfill(event.turnId)) backfill(event.tenant, event.sessionId, event.turnId);
    },
  });
  // A turn that began before the dashboard did: its start, limits and earlier answers come from the log, once.
  const backfilling = new Set<string>();
  function backfill(tenant: string, sessionId: string, turnId: string): void {
    if (backfilling.has(turnId) || backfilling.size >= 20) return;
    backfilling.add(turnId);
    log
      .read(tenant, sessionId, { timeoutMs: 10_000 })
      .then((read) => fleet.backfill(turnId, read.events))
      .catch((err: unknown) => logger.debug({ err, tenant, sessionId }, 'could not backfill a turn from its log'))
      .finally(() => backfilling.delete(turnId));
  }
  void workers.poll().catch((err: unknown) => logger.debug({ err }, 'first $SRV poll failed'));

  const server = await createDashboardHttpServer({
    hub,
    logger,
    staticDir: STATIC_DIR,
    // Without a token, only requests addressed to a loopback host, wherever it is bound: the compose stack binds
    // all interfaces inside its container (and publishes the port on the host's loopback), and a web page must
    // not reach it through DNS rebinding there either.
    loopbackOnly: isLoopbackAddress(options.host) || options.token === undefined,
    ...(options.token ? { token: options.token } : {}),
    routes: {
      fleet: () => fleet.snapshot(),
      workers: workersView,
      sessions: () => reader.list(),
      machine: (name) => machines.get(name),
      async session(tenant, sessionId, signal) {
        const read = await reader.read(tenant, sessionId, { signal });
        return read.log.length === 0 && read.live.length === 0 ? undefined : read;
      },
      sessionView: (read) => ({
        tenant: read.tenant,
        sessionId: read.sessionId,
        log: read.log,
        live: read.live.filter((event) => event.type !== 'assistant.delta'),
        path: pathOf(read.log, read.live),
        node: leases.lease(read.tenant, read.sessionId)?.node || undefined,
        traces: traceLinks(read.log, options.traceUrl),
      }),
      config: () => (options.traceUrl ? { traceUrl: options.traceUrl } : {}),
      fork: (tenant, sessionId, body) => forkSession(tenant, sessionId, parseForkBody(codec, body)),
    },
  });
  await new Promise<void>((resolve, reject) => {
    server.once('error', (error: NodeJS.ErrnoException) => {
      if (error.code !== 'EADDRINUSE' && error.code !== 'EACCES') return reject(error);
      const why = error.code === 'EADDRINUSE' ? 'is in use' : 'may not be used by this user';
      reject(new InvalidInputError(`port ${options.port} on ${options.host} ${why}: set AGENTBUS_DASHBOARD_PORT (agentbus up --dashboard-port) to another port, or 0 for any free one`, { cause: error }));
    });
    server.listen(options.port, options.host, () => resolve());
  });
  const port = (server.address() as AddressInfo).port;
  server.on('error', (err) => logger.warn({ err }, 'dashboard server error'));
  const shownHost = options.host.includes(':') ? `[${options.host}]` : options.host;
  const url = `http://${shownHost}:${port}/`;
  logger.info({ url }, 'dashboard serving');

  let stopped: Promise<void> | undefined;
  return {
    url,
    port,
    hub,
    stop() {
      stopped ??= (async () => {
        watcher.stop();
        leases.stop();
        tombstones.stop();
        workers.stop();
        hub.stop();
        server.closeAllConnections();
        await new Promise<void>((resolve) => server.close(() => resolve()));
      })();
      return stopped;
    },
  };
}

