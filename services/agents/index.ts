import type { NatsConnection } from '@nats-io/nats-core';
import { createAgentbusClient, EventReader } from '../../src/client/index.ts';
import type { Logger } from '../../src/logging.ts';
import { createCodec } from '../../src/protocol/index.ts';
import { createRefusalLog } from '../../src/refusal-log.ts';
import { startAgentHost } from './agent-host.ts';
import type { AgentHost } from './agent-host.ts';
import type { AgentsConfig } from './config.ts';

export { AGENTS_CONFIG_ENV, agentsConfigFromEnv, parseAgentsConfig } from './config.ts';
export type { AgentsConfig, ExposedAgent } from './config.ts';
export { AGENT_PROTOCOL_VERSION, AGENTS_QUEUE_GROUP, AGENTS_SERVICE, AgentStatus, AgentVerb, agentSubject } from './wire.ts';
export type { AgentHost } from './agent-host.ts';

/** Options of {@link startAgentsService}. */
export interface AgentsServiceOptions {
  readonly nc: NatsConnection;
  readonly logger: Logger;
  readonly config: AgentsConfig;
  /** The harness version announced on `$SRV`; default 0.1.0. */
  readonly version?: string;
  /** The subject prefix of the bus (`AGENTBUS_PREFIX`). */
  readonly prefix?: string;
  /** Reply prefixes answered beside `_INBOX.` and `_R_.`. */
  readonly trustedInboxes?: readonly string[];
  /** Prompts one agent handles at once; default 32. */
  readonly maxConcurrentPrompts?: number;
}

/** The running agents service: one host per exposed agent. */
export interface AgentsService {
  readonly hosts: readonly AgentHost[];
  stop(): Promise<void>;
}

/**
 * Exposes agentbus agents to the callers of the Synadia Agent Protocol 0.3: one `agents` registration per configured
 * identity, each prompt run as a turn of its tenant's session through the client SDK. The service follows sessions
 * by subscription (no JetStream), so its user needs only the session subjects of the tenants it serves.
 *
 * @example
 * const service = startAgentsService({ nc, logger, config: parseAgentsConfig({ agents: [{ owner: 'acme', name: 'support', tenant: 'acme', session: 'support' }] }) });
 */
export function startAgentsService(options: AgentsServiceOptions): AgentsService {
  const { nc, logger, config } = options;
  const codec = createCodec({ maxPayload: nc.info?.max_payload });
  const client = createAgentbusClient({ nc, codec, eventReader: EventReader.core, ...(options.prefix ? { prefix: options.prefix } : {}) });
  const refusals = createRefusalLog({ logger, what: 'agent protocol request refused' });
  const { agents, ...settings } = config;
  const hosts = agents.map((agent) =>
    startAgentHost({
      nc,
      logger,
      client,
      codec,
      agent,
      settings,
      version: options.version ?? '0.1.0',
      serverMaxPayload: nc.info?.max_payload ?? 1024 * 1024,
      maxConcurrentPrompts: options.maxConcurrentPrompts ?? 32,
      trustedInboxes: options.trustedInboxes ?? [],
      refusals,
    }),
  );
  return {
    hosts,
    async stop() {
      await Promise.allSettled(hosts.map((host) => host.stop()));
      refusals.close();
    },
  };
}
