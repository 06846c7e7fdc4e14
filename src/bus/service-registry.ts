import { headers as createHeaders, nuid } from '@nats-io/nats-core';
import type { Msg, NatsConnection, Subscription } from '@nats-io/nats-core';
import { InvalidInputError } from '../errors.ts';
import type { Logger } from '../logging.ts';
import { ContentType } from '../protocol/index.ts';
import {
  SEMVER_PATTERN,
  SERVICE_NAME_PATTERN,
  ServiceResponseType,
  ServiceVerb,
  serviceSubject,
} from './service-info.ts';
import type { EndpointInfo, EndpointStats, ServiceInfo, ServicePing, ServiceStats } from './service-info.ts';
import { createScrubber } from '../scrub/index.ts';
import type { Scrubber } from '../scrub/index.ts';
import { createRefusalLog } from '../refusal-log.ts';
import { createReplyGuard, replyPolicyOf } from './reply-guard.ts';
import type { ReplyPolicy } from './reply-guard.ts';

/** One endpoint a service announces. The host subscribes to `subject` itself. */
export interface ServiceEndpointConfig {
  readonly name: string;
  readonly subject: string;
  /** Queue group of the endpoint's subscription; ADR-32's default is `q`. */
  readonly queueGroup?: string;
  readonly metadata?: Readonly<Record<string, string>>;
}

/** What a service says about itself on `$SRV.PING|INFO|STATS`. */
export interface ServiceRegistrationConfig {
  /** The kind of service, shared by all its instances: `[A-Za-z0-9_-]+`. */
  readonly name: string;
  /** A semver version. */
  readonly version: string;
  readonly description?: string;
  readonly metadata?: Readonly<Record<string, string>>;
  readonly endpoints: readonly ServiceEndpointConfig[];
}

/** How one request to an endpoint went, for its stats. */
export interface EndpointOutcome {
  readonly durationMs: number;
  /** Set when the request failed: the error's text, kept as `last_error`. */
  readonly error?: string;
}

/** A live registration: answers the `$SRV` verbs until stopped. */
export interface ServiceRegistration {
  /** This instance's unique id. */
  readonly id: string;
  readonly name: string;
  info(): ServiceInfo;
  stats(): ServiceStats;
  /** Adds one request to an endpoint's stats. Unknown endpoint names are ignored. */
  record(endpoint: string, outcome: EndpointOutcome): void;
  /** Clears the request stats. */
  reset(): void;
  /** Drains the `$SRV` subscriptions: the instance no longer answers discovery. */
  stop(): Promise<void>;
}

interface EndpointCounters {
  numRequests: number;
  numErrors: number;
  lastError: string;
  processingNanos: number;
}

/** Dependencies and extras of a registration. */
export interface ServiceRegistrationOptions {
  readonly logger?: Logger;
  readonly newId?: () => string;
  readonly now?: () => number;
  /** Health figures sent as the `data` of every STATS answer. */
  readonly statsData?: () => Record<string, unknown>;
  /** Extra data of an endpoint's stats (the spec's `data`), asked at every `$SRV.STATS`: e.g. a provider's circuit state. */
  readonly endpointData?: (endpoint: string) => Record<string, unknown> | undefined;
  /**
   * Scrubs an endpoint's `last_error` before `$SRV.STATS` tells it (an error's text may carry what the request or the
   * tool had: a token in a URL, a password); by default the scrubber's fast pass without configured secrets.
   */
  readonly scrub?: (text: string) => string;
  /** Which reply subjects the `$SRV` answers go to (see `checkReply`); default read from the connection. */
  readonly replyPolicy?: ReplyPolicy;
}

/** The longest `last_error` a STATS answer carries; the rest is cut. */
const MAX_LAST_ERROR_CHARS = 512;

const DEFAULT_QUEUE_GROUP = 'q';

function validateConfig(config: ServiceRegistrationConfig): void {
  if (!SERVICE_NAME_PATTERN.test(config.name)) {
    throw new InvalidInputError(`service name must match ${SERVICE_NAME_PATTERN.source}, got ${JSON.stringify(config.name)}`);
  }
  if (!SEMVER_PATTERN.test(config.version)) {
    throw new InvalidInputError(`service version must be semver, got ${JSON.stringify(config.version)}`);
  }
  const seen = new Set<string>();
  for (const endpoint of config.endpoints) {
    if (!SERVICE_NAME_PATTERN.test(endpoint.name)) {
      throw new InvalidInputError(`endpoint name must match ${SERVICE_NAME_PATTERN.source}, got ${JSON.stringify(endpoint.name)}`);
    }
    if (seen.has(endpoint.name)) throw new InvalidInputError(`endpoint ${endpoint.name} is registered twice`);
    seen.add(endpoint.name);
  }
}

/**
 * Announces a service through the NATS services API (ADR-32) without owning its endpoints: it answers
 * `$SRV.PING`, `$SRV.INFO` and `$SRV.STATS` (all services, by name, and by name and id) with the JSON
 * bodies of the spec. The host subscribes to its endpoint subjects itself and reports each request
 * with `record()`, so the stats are real.
 *
 * @example
 * const registration = createServiceRegistration(nc, {
 *   name: 'agentbus-tools',
 *   version: '0.1.0',
 *   endpoints: [{ name: 'read_file', subject: 'agentbus.tools.read_file.call', queueGroup: 'agentbus.tools.read_file' }],
 * });
 * registration.record('read_file', { durationMs: 3 });
 * await registration.stop();
 */
export function createServiceRegistration(
  nc: NatsConnection,
  config: ServiceRegistrationConfig,
  options: ServiceRegistrationOptions = {},
): ServiceRegistration {
  validateConfig(config);
  const id = (options.newId ?? (() => nuid.next()))();
  const now = options.now ?? Date.now;
  const started = new Date(now()).toISOString();
  const metadata = { ...config.metadata };
  const endpoints: EndpointInfo[] = config.endpoints.map((endpoint) => ({
    name: endpoint.name,
    subject: endpoint.subject,
    queue_group: endpoint.queueGroup ?? DEFAULT_QUEUE_GROUP,
    metadata: { ...endpoint.metadata },
  }));
  const counters = new Map<string, EndpointCounters>();
  const resetCounters = () => {
    for (const endpoint of endpoints) counters.set(endpoint.name, { numRequests: 0, numErrors: 0, lastError: '', processingNanos: 0 });
  };
  resetCounters();

  // Scrubbed when asked for, not per failure: STATS is rare, failures need not be. Made on first use.
  let defaultScrubber: Scrubber | undefined;
  const scrub = options.scrub ?? ((text: string) => (defaultScrubber ??= createScrubber()).scrubSync(text));
  const lastError = (text: string) => (text === '' ? '' : scrub(text.length > MAX_LAST_ERROR_CHARS ? `${text.slice(0, MAX_LAST_ERROR_CHARS)}…` : text));
  const ping = (): ServicePing => ({ type: ServiceResponseType.ping, name: config.name, id, version: config.version, metadata });
  const info = (): ServiceInfo => ({
    type: ServiceResponseType.info,
    name: config.name,
    id,
    version: config.version,
    description: config.description ?? '',
    metadata,
    endpoints,
  });
  const stats = (): ServiceStats => ({
    type: ServiceResponseType.stats,
    name: config.name,
    id,
    version: config.version,
    metadata,
    started,
    endpoints: endpoints.map((endpoint): EndpointStats => {
      const counter = counters.get(endpoint.name)!;
      const data = options.endpointData?.(endpoint.name);
      return {
        ...(data === undefined ? {} : { data }),
        name: endpoint.name,
        subject: endpoint.subject,
        queue_group: endpoint.queue_group,
        num_requests: counter.numRequests,
        num_errors: counter.numErrors,
        last_error: lastError(counter.lastError),
        processing_time: counter.processingNanos,
        average_processing_time: counter.numRequests === 0 ? 0 : Math.round(counter.processingNanos / counter.numRequests),
      };
    }),
    ...(options.statsData ? { data: options.statsData() } : {}),
  });

  // The services API speaks JSON, so that `nats micro ls` and other clients read it.
  const encoder = new TextEncoder();
  const responders: Record<ServiceVerb, () => unknown> = { PING: ping, INFO: info, STATS: stats };
  const subscriptions: Subscription[] = [];
  const refusals = options.logger ? createRefusalLog({ logger: options.logger, what: 'service discovery request refused' }) : undefined;
  const replies = createReplyGuard({ policy: options.replyPolicy ?? replyPolicyOf(nc), refusals: refusals ?? { refused: () => undefined } });
  for (const verb of Object.values(ServiceVerb)) {
    for (const subject of [serviceSubject(verb), serviceSubject(verb, config.name), serviceSubject(verb, config.name, id)]) {
      subscriptions.push(
        nc.subscribe(subject, {
          callback: (error: Error | null, message: Msg) => {
            if (error) {
              options.logger?.warn({ err: error, subject }, 'service discovery subscription failed');
              return;
            }
            if (!replies.admits(message)) return;
            const headers = createHeaders();
            headers.set('Content-Type', ContentType.json);
            message.respond(encoder.encode(JSON.stringify(responders[verb]())), { headers });
          },
        }),
      );
    }
  }

  let stopped: Promise<void> | undefined;
  return {
    id,
    name: config.name,
    info,
    stats,
    record(endpoint, outcome) {
      const counter = counters.get(endpoint);
      if (!counter) return;
      counter.numRequests += 1;
      counter.processingNanos += Math.max(0, Math.round(outcome.durationMs * 1_000_000));
      if (outcome.error !== undefined) {
        counter.numErrors += 1;
        counter.lastError = outcome.error;
      }
    },
    reset: resetCounters,
    stop() {
      stopped ??= (async () => {
        refusals?.close();
        if (nc.isClosed()) return;
        const open = subscriptions.filter((subscription) => !subscription.isClosed());
        const results = await Promise.allSettled(open.map((subscription) => subscription.drain()));
        for (const result of results) {
          if (result.status === 'rejected') options.logger?.warn({ err: result.reason }, 'service discovery drain failed');
        }
      })();
      return stopped;
    },
  };
}

export { discoverServices } from './service-discovery.ts';
export type { DiscoverOptions } from './service-discovery.ts';
