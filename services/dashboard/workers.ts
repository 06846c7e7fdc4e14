import type { NatsConnection } from '@nats-io/nats-core';
import { discoverServices } from '../../src/bus/service-discovery.ts';
import { ServiceVerb, serviceSubject } from '../../src/bus/service-info.ts';
import type { ServiceInfo } from '../../src/bus/service-info.ts';
import type { Logger } from '../../src/logging.ts';
import { ContentType } from '../../src/protocol/index.ts';
import type { Codec } from '../../src/protocol/index.ts';

/** One endpoint of a service instance: a tool, or a provider's generate. */
export interface EndpointView {
  readonly name: string;
  readonly subject: string;
  readonly requests: number;
  readonly errors: number;
  /** Mean processing time in milliseconds; 0 before the first request. */
  readonly averageMs: number;
  readonly lastError: string;
  readonly metadata: Readonly<Record<string, string>>;
  /** The endpoint's stats `data`: a provider's `{ circuit }`. */
  readonly data: Readonly<Record<string, unknown>>;
}

/** One service instance found on `$SRV`. */
export interface ServiceInstanceView {
  readonly name: string;
  readonly id: string;
  readonly version: string;
  readonly description: string;
  readonly metadata: Readonly<Record<string, string>>;
  readonly started: string | undefined;
  readonly endpoints: readonly EndpointView[];
}

/** The services `$SRV` knows, polled. */
export interface WorkersPoller {
  services(): readonly ServiceInstanceView[];
  /** Grows when an answer differs from the last. */
  readonly version: number;
  /** Polls now; resolves when the answers are in. */
  poll(options?: { signal?: AbortSignal }): Promise<void>;
  stop(): void;
}

interface StatsAnswer {
  id?: unknown;
  started?: unknown;
  endpoints?: Array<{ name?: unknown; num_requests?: unknown; num_errors?: unknown; average_processing_time?: unknown; last_error?: unknown; data?: unknown }>;
}

/** Asks `$SRV.STATS` and returns every well-formed answer by instance id. */
async function collectStats(nc: NatsConnection, codec: Codec, timeoutMs: number, logger: Logger): Promise<Map<string, StatsAnswer>> {
  const byId = new Map<string, StatsAnswer>();
  try {
    const replies = await nc.requestMany(serviceSubject(ServiceVerb.stats), new Uint8Array(), { strategy: 'stall', maxWait: timeoutMs, stall: 150 });
    for await (const message of replies) {
      if (message.data.length === 0) break;
      try {
        const answer = codec.decode(message.data, ContentType.json) as StatsAnswer;
        if (answer && typeof answer.id === 'string') byId.set(answer.id, answer);
      } catch (err) {
        logger.debug({ err }, 'skipped a malformed $SRV.STATS answer');
      }
    }
  } catch (err) {
    logger.debug({ err }, '$SRV.STATS found no service');
  }
  return byId;
}

function merge(info: ServiceInfo, stats: StatsAnswer | undefined): ServiceInstanceView {
  const endpointStats = new Map((stats?.endpoints ?? []).map((endpoint) => [String(endpoint.name), endpoint]));
  return {
    name: info.name,
    id: info.id,
    version: info.version,
    description: info.description,
    metadata: info.metadata,
    started: typeof stats?.started === 'string' ? stats.started : undefined,
    endpoints: info.endpoints.map((endpoint) => {
      const counts = endpointStats.get(endpoint.name);
      return {
        name: endpoint.name,
        subject: endpoint.subject,
        requests: Number(counts?.num_requests ?? 0) || 0,
        errors: Number(counts?.num_errors ?? 0) || 0,
        averageMs: (Number(counts?.average_processing_time ?? 0) || 0) / 1_000_000,
        lastError: typeof counts?.last_error === 'string' ? counts.last_error : '',
        metadata: endpoint.metadata,
        data: typeof counts?.data === 'object' && counts.data !== null && !Array.isArray(counts.data) ? (counts.data as Record<string, unknown>) : {},
      };
    }),
  };
}

/**
 * Polls `$SRV.INFO` and `$SRV.STATS` every `intervalMs` (default 3 s): tool workers with their tools'
 * calls, errors and mean latency, providers with their circuit state (in their metadata), any other
 * service on the bus.
 */
export function createWorkersPoller(deps: { nc: NatsConnection; codec: Codec; logger: Logger; intervalMs?: number; timeoutMs?: number }): WorkersPoller {
  const timeoutMs = deps.timeoutMs ?? 1500;
  let current: ServiceInstanceView[] = [];
  let fingerprint = '';
  let version = 0;
  let running: Promise<void> | undefined;
  const controller = new AbortController();

  async function poll(options: { signal?: AbortSignal } = {}): Promise<void> {
    const signal = options.signal ? AbortSignal.any([options.signal, controller.signal]) : controller.signal;
    const [infos, stats] = await Promise.all([
      discoverServices(deps.nc, undefined, { timeoutMs, signal, codec: deps.codec, logger: deps.logger }).catch((err: unknown) => {
        if (!signal.aborted) deps.logger.debug({ err }, '$SRV.INFO failed');
        return [] as ServiceInfo[];
      }),
      collectStats(deps.nc, deps.codec, timeoutMs, deps.logger),
    ]);
    const next = infos.map((info) => merge(info, stats.get(info.id))).sort((a, b) => a.name.localeCompare(b.name) || a.id.localeCompare(b.id));
    const print = JSON.stringify(next);
    if (print !== fingerprint) {
      fingerprint = print;
      current = next;
      version += 1;
    }
  }

  const timer = setInterval(() => {
    if (running || deps.nc.isClosed()) return;
    running = poll()
      .catch((err: unknown) => deps.logger.debug({ err }, 'polling $SRV failed'))
      .finally(() => (running = undefined));
  }, deps.intervalMs ?? 3000);
  timer.unref?.();

  return {
    services: () => current,
    get version() {
      return version;
    },
    poll,
    stop() {
      clearInterval(timer);
      controller.abort(new Error('workers poller stopped'));
    },
  };
}
