import { hostname } from 'node:os';
import type { NatsConnection } from '@nats-io/nats-core';
import { nuid } from '@nats-io/nats-core';
import { createProviderClient } from '../../src/bus/provider-client.ts';
import { createToolClient } from '../../src/bus/tool-client.ts';
import type { Logger } from '../../src/logging.ts';
import { createCodec, createSubjects } from '../../src/protocol/index.ts';
import { createScrubber } from '../../src/scrub.ts';
import { createTokenCounter } from '../../src/tokens.ts';
import type { TokenCounter } from '../../src/tokens.ts';
import { DEFAULT_RUNTIME_CONFIG } from './config.ts';
import type { RuntimeConfig } from './config.ts';
import { startRuntime } from './runtime.ts';
import type { Runtime } from './runtime.ts';

export { startRuntime } from './runtime.ts';
export type { Runtime, RuntimeDeps } from './runtime.ts';
export { DEFAULT_RUNTIME_CONFIG } from './config.ts';
export type { RuntimeConfig } from './config.ts';
export type { ProviderPort, ToolPort, ToolInfo } from './ports.ts';

/** Options of {@link startRuntimeService}: the connection, a logger, and any config to override. */
export interface RuntimeServiceOptions {
  readonly nc: NatsConnection;
  readonly logger: Logger;
  readonly config?: Partial<RuntimeConfig>;
  /** Share one token counter between runtimes of a process (loading an encoding costs memory). */
  readonly tokens?: TokenCounter;
}

/** A node id unique per process: host, pid and a random part. */
export function createNodeId(): string {
  return `${hostname().replace(/[^A-Za-z0-9_-]/g, '-').slice(0, 32)}-${process.pid}-${nuid.next().slice(-6)}`;
}

/**
 * Starts the runtime service on a connection, with the bus clients for providers and tools.
 *
 * @example
 * const runtime = await startRuntimeService({ nc, logger, config: { prefix: 'agentbus' } });
 * // … later
 * await runtime.stop();
 */
export async function startRuntimeService(options: RuntimeServiceOptions): Promise<Runtime> {
  const config: RuntimeConfig = { ...DEFAULT_RUNTIME_CONFIG, nodeId: createNodeId(), ...options.config };
  const codec = createCodec();
  const subjects = createSubjects(config.prefix);
  const { nc, logger } = options;
  return startRuntime({
    nc,
    codec,
    logger,
    config,
    provider: createProviderClient({ nc, subjects, codec, logger }),
    tools: createToolClient({ nc, subjects, codec, logger }),
    tokens: options.tokens ?? createTokenCounter(),
    scrubber: createScrubber(),
    newId: () => nuid.next(),
    now: () => Date.now(),
  });
}

/** Reads runtime settings from the environment (`AGENTBUS_PREFIX`, `AGENTBUS_MODEL`, `AGENTBUS_MAX_STEPS`, …). */
export function runtimeConfigFromEnv(env: NodeJS.ProcessEnv): Partial<RuntimeConfig> {
  const config: { -readonly [K in keyof RuntimeConfig]?: RuntimeConfig[K] } = {};
  if (env.AGENTBUS_PREFIX) config.prefix = env.AGENTBUS_PREFIX;
  if (env.AGENTBUS_MODEL) config.defaultModel = env.AGENTBUS_MODEL;
  if (env.AGENTBUS_SYSTEM_PROMPT) config.systemPrompt = env.AGENTBUS_SYSTEM_PROMPT;
  const numbers: Array<[string, 'maxSteps' | 'toolTimeoutMs' | 'providerTimeoutMs' | 'leaseTtlMs' | 'idleMs']> = [
    ['AGENTBUS_MAX_STEPS', 'maxSteps'],
    ['AGENTBUS_TOOL_TIMEOUT_MS', 'toolTimeoutMs'],
    ['AGENTBUS_PROVIDER_TIMEOUT_MS', 'providerTimeoutMs'],
    ['AGENTBUS_LEASE_TTL_MS', 'leaseTtlMs'],
    ['AGENTBUS_IDLE_MS', 'idleMs'],
  ];
  for (const [name, key] of numbers) {
    const raw = env[name];
    if (raw === undefined || raw === '') continue;
    const value = Number(raw);
    if (!Number.isInteger(value) || value <= 0) throw new Error(`${name} must be a positive integer, got ${JSON.stringify(raw)}`);
    config[key] = value;
  }
  return config;
}
