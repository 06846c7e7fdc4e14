import type { NatsConnection } from '@nats-io/nats-core';
import { startServiceHealth } from '../../../src/bus/service-health.ts';
import type { ServiceHealthFigures } from '../../../src/bus/service-health.ts';
import { createServiceRegistration } from '../../../src/bus/service-registry.ts';
import type { EndpointOutcome, ServiceRegistration } from '../../../src/bus/service-registry.ts';
import type { Logger } from '../../../src/logging.ts';
import type { ReplyPolicy } from '../../../src/bus/reply-guard.ts';
import { SessionVerb, createSubjects } from '../../../src/protocol/index.ts';
import type { IngressCounts } from '../ingress/ingress.ts';

/** The `$SRV` name of runtime nodes. */
export const RUNTIME_SERVICE_NAME = 'agentbus-runtime';
/** The version runtime nodes announce. */
export const RUNTIME_SERVICE_VERSION = '0.1.0';

/** What a runtime node says of itself in the `data` of its `$SRV.STATS` answer. */
export interface NodeHealthFigures extends ServiceHealthFigures {
  readonly node: string;
  readonly sessions: number;
  /** Session messages heard from the queue group, passed on to their holder, and passed on to this node. */
  readonly ingress: IngressCounts;
}

/** A runtime node's health: its `$SRV` registration, event-loop delay and connection watch. */
export interface NodeHealth {
  figures(): NodeHealthFigures;
  /** Adds one handled message of a verb to the node's `$SRV` stats. */
  record(verb: SessionVerb, outcome: EndpointOutcome): void;
  stop(): Promise<void>;
}

/** Options of {@link startNodeHealth}. */
export interface NodeHealthOptions {
  readonly nc: NatsConnection;
  readonly logger: Logger;
  readonly prefix: string;
  readonly nodeId: string;
  readonly sessions: () => number;
  readonly ingress: () => IngressCounts;
  /** The queue group its session verbs are served in (`queue` ingress), or '' (every node hears every message). */
  readonly queueGroup: string;
  /** The node cannot serve and a reconnect did not help: exit, so that a supervisor starts it anew. */
  readonly onUnrecoverable: (reason: string) => void;
  /** Probe interval of the connection watch; default 5 s. */
  readonly probeIntervalMs?: number;
  /** Which reply subjects its `$SRV` answers go to; default read from `nc`. */
  readonly replyPolicy?: ReplyPolicy;
}

/**
 * Announces a runtime node on `$SRV` (`nats micro ls` lists the nodes; STATS counts each verb it handled and
 * carries its health as `data`), measures its event-loop delay, and probes its own subscriptions through the
 * server so that a node cut off as a slow consumer notices, subscribes anew, or gives up.
 */
export function startNodeHealth(options: NodeHealthOptions): NodeHealth {
  const { nc, logger } = options;
  const subjects = createSubjects(options.prefix);
  const registration: ServiceRegistration = createServiceRegistration(
    nc,
    {
      name: RUNTIME_SERVICE_NAME,
      version: RUNTIME_SERVICE_VERSION,
      description: 'agentbus runtime node: hosts session actors',
      metadata: { node: options.nodeId, prefix: options.prefix },
      // `queue` ingress: each message of a session verb reaches one node, which passes it on to the lease holder;
      // `broadcast`: no queue group, every node hears every message and the lease holder acts.
      endpoints: Object.values(SessionVerb).map((verb) => ({ name: verb, subject: subjects.anySession(verb), queueGroup: options.queueGroup })),
    },
    { logger, statsData: () => ({ ...figures() }), ...(options.replyPolicy ? { replyPolicy: options.replyPolicy } : {}) },
  );
  const health = startServiceHealth({
    nc,
    logger,
    serviceName: RUNTIME_SERVICE_NAME,
    instanceId: registration.id,
    onUnrecoverable: options.onUnrecoverable,
    ...(options.probeIntervalMs === undefined ? {} : { probeIntervalMs: options.probeIntervalMs }),
  });
  // Read by the registration's STATS answers, which only come once this has returned.
  const figures = (): NodeHealthFigures => ({ node: options.nodeId, sessions: options.sessions(), ingress: options.ingress(), ...health.figures() });
  return {
    figures,
    record: (verb, outcome) => registration.record(verb, outcome),
    async stop() {
      health.stop();
      await registration.stop();
    },
  };
}
