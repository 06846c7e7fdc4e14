import { hostname } from 'node:os';
import type { NatsConnection } from '@nats-io/nats-core';
import { nuid } from '@nats-io/nats-core';
import { createMemoryClient } from '../../src/bus/memory-client.ts';
import { createProviderClient } from '../../src/bus/provider-client.ts';
import { replicasFromEnv, streamLimitsFromEnv } from '../../src/bus/streams.ts';
import { createHookClient } from '../../src/bus/hook-client.ts';
import { createToolClient } from '../../src/bus/tool-client.ts';
import type { Logger } from '../../src/logging.ts';
import type { ReplyPolicy } from '../../src/bus/reply-guard.ts';
import { PREFIX_ENV, createCodec, createSubjects, prefixFromEnv } from '../../src/protocol/index.ts';
import { createScrubber } from '../../src/scrub/index.ts';
import type { Scrubber } from '../../src/scrub/index.ts';
import { createTokenCounter } from '../../src/tokens.ts';
import type { TokenCounter } from '../../src/tokens.ts';
import { DEFAULT_ADMISSION_LIMITS } from './ingress/admission.ts';
import type { AdmissionLimits, Rate } from './ingress/admission.ts';
import { parseRate } from '../../src/rate-limit.ts';
import { DEFAULT_RUNTIME_CONFIG, IngressMode, ceilingsFromEnv, toolHooksFromEnv } from './config.ts';
import { limitsFromEnv } from './limits/limits-config.ts';
import type { RuntimeConfig } from './config.ts';
import { startNodeHealth } from './health/node-health.ts';
import { INGRESS_QUEUE_GROUP } from './ingress/forward.ts';
import type { NodeHealthFigures } from './health/node-health.ts';
import { createMemoryPort } from './context/recall.ts';
import { startRuntime } from './runtime.ts';
import type { Runtime } from './runtime.ts';
import { createToolHooks } from './tools/tool-hooks.ts';
import type { AgentProfiles } from './agents/profiles.ts';

export { startRuntime } from './runtime.ts';
export { PROFILES_ENV, parseProfiles, profilesFromEnv } from './agents/profiles.ts';
export type { AgentProfile, AgentProfiles } from './agents/profiles.ts';
export type { Runtime, RuntimeDeps } from './runtime.ts';
export type { IngressCounts } from './ingress/ingress.ts';
export { RUNTIME_SERVICE_NAME } from './health/node-health.ts';
export type { NodeHealthFigures } from './health/node-health.ts';
export { DEFAULT_RUNTIME_CONFIG, IngressMode, ToolHookOnError } from './config.ts';
export type { PromptCeilings, RuntimeConfig, ToolHookConfig } from './config.ts';
export { DEFAULT_ADMISSION_LIMITS } from './ingress/admission.ts';
export type { AdmissionLimits, Rate } from './ingress/admission.ts';
export type { ProviderPort, ToolHookPort, ToolPort, ToolInfo } from './ports.ts';
export { createToolHooks } from './tools/tool-hooks.ts';
export type { ToolHooks } from './tools/tool-hooks.ts';

/** Options of {@link startRuntimeService}: the connection, a logger, and any config to override. */
export interface RuntimeServiceOptions {
  readonly nc: NatsConnection;
  readonly logger: Logger;
  readonly config?: Partial<RuntimeConfig>;
  /** Share one token counter between runtimes of a process (loading an encoding costs memory). */
  readonly tokens?: TokenCounter;
  /** Scrubs tool output before it is logged; default a scrubber with no configured secrets. */
  readonly scrubber?: Scrubber;
  /**
   * The node's connection cannot serve and a forced reconnect did not help. A process exits here (non-zero,
   * so `agentbus up` or another supervisor starts it anew); by default it is only logged.
   */
  readonly onUnrecoverable?: (reason: string) => void;
  /** Which reply subjects the node answers (session verbs, `$SRV`): `replyPolicyFromBus` in `main.ts`; default read from `nc`. */
  readonly replyPolicy?: ReplyPolicy;
  /** Agent profiles (`profilesFromEnv`): callable as tools and handoffs by the sessions of their tenant. */
  readonly profiles?: AgentProfiles;
}

/** A runtime node: the runtime and its health (also on `$SRV.STATS`). */
export interface RuntimeNode extends Runtime {
  health(): NodeHealthFigures;
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
export async function startRuntimeService(options: RuntimeServiceOptions): Promise<RuntimeNode> {
  const merged: RuntimeConfig = { ...DEFAULT_RUNTIME_CONFIG, nodeId: createNodeId(), ...options.config };
  // A steps ceiling below the built-in default lowers the default; a maxSteps given above it is refused at start.
  const config: RuntimeConfig = options.config?.maxSteps === undefined ? { ...merged, maxSteps: Math.min(merged.maxSteps, merged.ceilings.maxSteps) } : merged;
  const codec = createCodec();
  const subjects = createSubjects(config.prefix);
  const { nc, logger } = options;
  const tokens = options.tokens ?? createTokenCounter();
  // Loading the encoding and compiling the encoder hold the event loop for about half a second: now, not in
  // the first turn's Preparing.
  tokens.warmUp?.();
  // The scrubber's rules compile on first use too; the first tool output must not pay for it.
  const scrubber = options.scrubber ?? createScrubber({ logger });
  await scrubber.warmUp();
  let runtime: Runtime | undefined;
  const health = startNodeHealth({
    nc,
    logger: logger.child({ service: 'runtime', node: config.nodeId }),
    prefix: config.prefix,
    nodeId: config.nodeId,
    sessions: () => runtime?.sessions() ?? 0,
    ingress: () => runtime?.ingress() ?? { heard: 0, forwardedIn: 0, forwardedOut: 0 },
    queueGroup: config.ingress === IngressMode.queue ? INGRESS_QUEUE_GROUP : '',
    onUnrecoverable: options.onUnrecoverable ?? (() => undefined),
    ...(options.replyPolicy ? { replyPolicy: options.replyPolicy } : {}),
  });
  try {
    runtime = await startRuntime({
      nc,
      codec,
      logger,
      config,
      provider: createProviderClient({ nc, subjects, codec, logger }),
      tools: createToolClient({ nc, subjects, codec, logger, heartbeatLapseMs: config.toolHeartbeatLapseMs }),
      // No hooks configured: no hook client, and not a single extra request per call.
      ...(config.toolHooks.before.length + config.toolHooks.after.length > 0
        ? { hooks: createToolHooks({ port: createHookClient({ nc, subjects, codec, logger }), config: config.toolHooks, logger, now: () => Date.now() }) }
        : {}),
      memory: createMemoryPort(createMemoryClient({ nc, codec, prefix: config.prefix }), () => Date.now()),
      tokens,
      scrubber,
      newId: () => nuid.next(),
      now: () => Date.now(),
      onHandled: health.record,
      ...(options.replyPolicy ? { replyPolicy: options.replyPolicy } : {}),
      ...(options.profiles ? { profiles: options.profiles } : {}),
    });
  } catch (err) {
    await health.stop();
    throw err;
  }
  const started = runtime;
  return {
    sessions: () => started.sessions(),
    ingress: () => started.ingress(),
    health: health.figures,
    async stop() {
      await started.stop();
      await health.stop();
    },
  };
}

/**
 * Reads runtime settings from the environment (`AGENTBUS_PREFIX`, `AGENTBUS_MODEL`, `AGENTBUS_MAX_STEPS`, …).
 * `logger` hears the one warning of a start: an `AGENTBUS_MAX_STEPS` above the default steps ceiling, with no
 * `AGENTBUS_MAX_STEPS_CEILING` set, raises the ceiling to it (it started before the ceiling existed).
 */
export function runtimeConfigFromEnv(env: NodeJS.ProcessEnv, logger?: { warn(fields: object, message: string): void }): Partial<RuntimeConfig> {
  const config: { -readonly [K in keyof RuntimeConfig]?: RuntimeConfig[K] } = {};
  if (env[PREFIX_ENV]?.trim()) config.prefix = prefixFromEnv(env);
  if (env.AGENTBUS_MODEL) config.defaultModel = env.AGENTBUS_MODEL;
  if (env.AGENTBUS_SYSTEM_PROMPT) config.systemPrompt = env.AGENTBUS_SYSTEM_PROMPT;
  if (env.AGENTBUS_NODE_ID) {
    if (!/^[A-Za-z0-9_-]{1,64}$/.test(env.AGENTBUS_NODE_ID)) throw new Error(`AGENTBUS_NODE_ID must match [A-Za-z0-9_-]{1,64}, got ${JSON.stringify(env.AGENTBUS_NODE_ID)}`);
    config.nodeId = env.AGENTBUS_NODE_ID;
  }
  const replicas = replicasFromEnv(env);
  if (replicas !== undefined) config.replicas = replicas;
  const numbers: Array<[string, 'maxSteps' | 'toolTimeoutMs' | 'waitForServiceMs' | 'toolHeartbeatLapseMs' | 'ledgerTtlMs' | 'ledgerMaxBytes' | 'providerTimeoutMs' | 'leaseTtlMs' | 'idleMs' | 'turnTimeoutMs' | 'approvalTimeoutMs']> = [
    ['AGENTBUS_MAX_STEPS', 'maxSteps'],
    ['AGENTBUS_TOOL_TIMEOUT_MS', 'toolTimeoutMs'],
    ['AGENTBUS_WAIT_FOR_SERVICE_MS', 'waitForServiceMs'],
    ['AGENTBUS_TOOL_HEARTBEAT_LAPSE_MS', 'toolHeartbeatLapseMs'],
    ['AGENTBUS_LEDGER_TTL_MS', 'ledgerTtlMs'],
    ['AGENTBUS_LEDGER_MAX_BYTES', 'ledgerMaxBytes'],
    ['AGENTBUS_PROVIDER_TIMEOUT_MS', 'providerTimeoutMs'],
    ['AGENTBUS_LEASE_TTL_MS', 'leaseTtlMs'],
    ['AGENTBUS_IDLE_MS', 'idleMs'],
    ['AGENTBUS_TURN_TIMEOUT_MS', 'turnTimeoutMs'],
    ['AGENTBUS_APPROVAL_TIMEOUT_MS', 'approvalTimeoutMs'],
  ];
  for (const [name, key] of numbers) {
    const raw = env[name];
    if (raw === undefined || raw === '') continue;
    const value = Number(raw);
    if (!Number.isInteger(value) || value <= 0) throw new Error(`${name} must be a positive integer, got ${JSON.stringify(raw)}`);
    config[key] = value;
  }
  const onTimeout = env.AGENTBUS_APPROVAL_TIMEOUT_DECISION?.trim();
  if (onTimeout) {
    if (onTimeout !== 'deny' && onTimeout !== 'approve') throw new Error(`AGENTBUS_APPROVAL_TIMEOUT_DECISION must be deny or approve, got ${JSON.stringify(onTimeout)}`);
    config.approvalTimeoutDecision = onTimeout;
  }
  if (env.AGENTBUS_INGRESS) {
    const mode = env.AGENTBUS_INGRESS;
    if (mode !== IngressMode.broadcast && mode !== IngressMode.queue) throw new Error(`AGENTBUS_INGRESS must be broadcast or queue, got ${JSON.stringify(mode)}`);
    config.ingress = mode;
  }
  const admission = admissionFromEnv(env);
  if (admission) config.admission = admission;
  const recall = recallFromEnv(env);
  if (recall) config.recall = recall;
  const toolHooks = toolHooksFromEnv(env);
  if (toolHooks) config.toolHooks = toolHooks;
  const limits = limitsFromEnv(env);
  if (limits) config.limits = limits;
  const streamLimits = streamLimitsFromEnv(env);
  if (streamLimits) config.streamLimits = streamLimits;
  let ceilings = ceilingsFromEnv(env);
  // A maxSteps that started before the ceiling existed still starts: with no ceiling set, it becomes the ceiling.
  const ceilingSet = Boolean(env.AGENTBUS_MAX_STEPS_CEILING?.trim());
  const defaultCeiling = DEFAULT_RUNTIME_CONFIG.ceilings.maxSteps;
  if (!ceilingSet && config.maxSteps !== undefined && config.maxSteps > defaultCeiling) {
    ceilings = { ...(ceilings ?? DEFAULT_RUNTIME_CONFIG.ceilings), maxSteps: config.maxSteps };
    logger?.warn(
      { maxSteps: config.maxSteps, defaultCeiling },
      `AGENTBUS_MAX_STEPS (${config.maxSteps}) is above the default steps ceiling (${defaultCeiling}): the ceiling is raised to ${config.maxSteps}; set AGENTBUS_MAX_STEPS_CEILING to choose it`,
    );
  }
  if (ceilings) config.ceilings = ceilings;
  // Only a maxSteps set above the ceiling is an error; the built-in default of 8 gives way to a lower ceiling.
  const ceiling = ceilings?.maxSteps ?? defaultCeiling;
  if (config.maxSteps !== undefined && config.maxSteps > ceiling) {
    throw new Error(`AGENTBUS_MAX_STEPS (${config.maxSteps}) is above AGENTBUS_MAX_STEPS_CEILING (${ceiling}): lower it or raise the ceiling`);
  }
  return config;
}

/**
 * Recall from `AGENTBUS_RECALL_SHARE` (the share of the context window recalled snippets may take, 0 to 0.5; 0 turns
 * recall off), `AGENTBUS_RECALL_TIMEOUT_MS` and `AGENTBUS_RECALL_K` (snippets asked for, 1 to 50).
 */
function recallFromEnv(env: NodeJS.ProcessEnv): RuntimeConfig['recall'] | undefined {
  const names = ['AGENTBUS_RECALL_SHARE', 'AGENTBUS_RECALL_TIMEOUT_MS', 'AGENTBUS_RECALL_K'];
  if (names.every((name) => !env[name])) return undefined;
  const number = (name: string, fallback: number, valid: (value: number) => boolean, what: string) => {
    const raw = env[name];
    if (!raw) return fallback;
    const value = Number(raw);
    if (!valid(value)) throw new Error(`${name} must be ${what}, got ${JSON.stringify(raw)}`);
    return value;
  };
  const defaults = DEFAULT_RUNTIME_CONFIG.recall;
  return {
    share: number('AGENTBUS_RECALL_SHARE', defaults.share, (value) => value >= 0 && value <= 0.5, 'a share of the context window from 0 (recall off) to 0.5'),
    timeoutMs: number('AGENTBUS_RECALL_TIMEOUT_MS', defaults.timeoutMs, (value) => Number.isInteger(value) && value > 0, 'a positive whole number of milliseconds'),
    k: number('AGENTBUS_RECALL_K', defaults.k, (value) => Number.isInteger(value) && value >= 1 && value <= 50, 'a whole number from 1 to 50'),
  };
}

/**
 * Admission limits from `AGENTBUS_MAX_PROMPT_BYTES` (0: none beyond the codec's 1 MiB),
 * `AGENTBUS_SESSION_RATE` and `AGENTBUS_TENANT_RATE` (`<per second>` or `<per second>:<burst>`; 0: no limit).
 */
function admissionFromEnv(env: NodeJS.ProcessEnv): AdmissionLimits | undefined {
  const names = ['AGENTBUS_MAX_PROMPT_BYTES', 'AGENTBUS_SESSION_RATE', 'AGENTBUS_TENANT_RATE'];
  if (names.every((name) => !env[name])) return undefined;
  const defaults = DEFAULT_ADMISSION_LIMITS;
  const rawBytes = env.AGENTBUS_MAX_PROMPT_BYTES;
  let maxPromptBytes = defaults.maxPromptBytes;
  if (rawBytes) {
    maxPromptBytes = Number(rawBytes);
    if (!Number.isInteger(maxPromptBytes) || maxPromptBytes < 0) throw new Error(`AGENTBUS_MAX_PROMPT_BYTES must be a whole number of bytes (0: no limit), got ${JSON.stringify(rawBytes)}`);
  }
  return {
    maxPromptBytes,
    sessionRate: rateFromEnv(env, 'AGENTBUS_SESSION_RATE', defaults.sessionRate),
    tenantRate: rateFromEnv(env, 'AGENTBUS_TENANT_RATE', defaults.tenantRate),
  };
}

function rateFromEnv(env: NodeJS.ProcessEnv, name: string, fallback: Rate): Rate {
  const raw = env[name];
  return raw ? parseRate(name, raw, 'messages') : fallback;
}
