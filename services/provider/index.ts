import { coalesceWrites } from '../../src/bus/coalesce-writes.ts';
import type { NatsConnection } from '@nats-io/nats-core';
import { InvalidInputError } from '../../src/errors.ts';
import type { Logger } from '../../src/logging.ts';
import type { ReplyPolicy } from '../../src/bus/reply-guard.ts';
import { createCodec, createSubjects } from '../../src/protocol/index.ts';
import { createScrubber } from '../../src/scrub/index.ts';
import type { ProviderAdapter } from './adapter.ts';
import { createProviderAdapters } from './adapters/index.ts';
import { describeProviderConfig } from './config.ts';
import type { ProviderConfig } from './config.ts';
import { createOpenAIEmbedder, createScriptedEmbedder, withEmbedRetries } from './embedders.ts';
import type { EmbedAdapter } from './embedders.ts';
import { ProviderType } from './config.ts';
import { createProviderHost } from './host.ts';
import type { ProviderHost } from './host.ts';
import { loadScript } from './script.ts';
import type { Script } from './script.ts';
import { SCRIPTED_PROVIDER, createScriptedAdapter } from './scripted.ts';
import { providerSecrets } from './provider-secrets.ts';

export { createProviderHost, adapterModel, DEFAULT_REQUEST_TIMEOUT_MS, PROVIDER_SERVICE_NAME } from './host.ts';
export type { ProviderHost, ProviderHostOptions } from './host.ts';
export { createScriptedAdapter, createTimerClock, splitText, SCRIPTED_PROVIDER } from './scripted.ts';
export type { ScriptedAdapterOptions, ScriptedClock } from './scripted.ts';
export { loadScript, parseScript, scriptSchema } from './script.ts';
export type { Script, ScriptResponse } from './script.ts';
export { createChunkWriter, isTerminalChunk } from './chunk-writer.ts';
export type { ChunkWriter } from './chunk-writer.ts';
export type { AdapterRequest, ProviderAdapter } from './adapter.ts';
export { loadProviderConfig, resolveProviderConfig, describeProviderConfig, DEFAULT_MODELS } from './config.ts';
export type { ProviderConfig, ProviderSettings, ProviderConfigFile } from './config.ts';
export { createProviderAdapters } from './adapters/index.ts';
export { createOpenAIEmbedder, createScriptedEmbedder, withEmbedRetries, normalize, defaultEmbedModel, SCRIPTED_EMBED_DIMENSIONS } from './embedders.ts';
export type { EmbedAdapter, OpenAIEmbedderOptions } from './embedders.ts';
export type { ProviderAdaptersOptions } from './adapters/index.ts';

/** Options of {@link startProviderService}. */
export interface ProviderServiceOptions {
  readonly nc: NatsConnection;
  readonly logger: Logger;
  /** Subject prefix; default `agentbus`. */
  readonly prefix?: string;
  /** A JSON script file for the `scripted` provider. */
  readonly scriptPath?: string;
  /** A script given directly; wins over `scriptPath`. */
  readonly script?: Script;
  /** Health figures for the `data` of the service's `$SRV.STATS` answer. */
  readonly statsData?: () => Record<string, unknown>;
  /**
   * The provider configuration (see `loadProviderConfig`): each configured provider is served through
   * `createProviderAdapters` (retries, circuit breaker, cost, JSON actions).
   */
  readonly config?: ProviderConfig;
  /** More adapters, served as they are; one named like a configured provider replaces it, one named `scripted` the built-in one. */
  readonly adapters?: readonly ProviderAdapter[];
  /** Longest run of one request. Default 10 minutes. */
  readonly requestTimeoutMs?: number;
  /** The embedding model of every OpenAI-compatible provider that names none in its config (`AGENTBUS_EMBED_MODEL`). */
  readonly embedModel?: string;
  /** More embedders, served as they are; one named like a configured provider replaces its own. */
  readonly embedders?: readonly EmbedAdapter[];
  readonly signal?: AbortSignal;
  /** Which reply subjects it answers: `replyPolicyFromBus` in `main.ts`; default read from `nc`. */
  readonly replyPolicy?: ReplyPolicy;
}

/** A running provider service. */
export interface ProviderService {
  /** The names of the providers served. */
  readonly providers: readonly string[];
  /** The `$SRV` instance id (service `agentbus-provider`). */
  readonly id: string | undefined;
  /** Stops serving and ends the requests in flight; the connection stays open. */
  stop(): Promise<void>;
}

/**
 * Starts the provider service on an open connection, in this process: the built-in `scripted`
 * provider, the providers of `config`, and any `adapters`.
 *
 * @example
 * const config = await loadProviderConfig({ env: process.env });
 * const service = await startProviderService({ nc, logger, config, scriptPath: 'examples/demo-script.json' });
 * // …
 * await service.stop();
 */
export async function startProviderService(options: ProviderServiceOptions): Promise<ProviderService> {
  options.signal?.throwIfAborted();
  const logger = options.logger.child({ service: 'provider' });
  const given = options.adapters ?? [];
  const configured = options.config ? createProviderAdapters(options.config, { logger }) : [];
  const extra = [...given, ...configured.filter((adapter) => !given.some((other) => other.name === adapter.name))];
  const adapters: ProviderAdapter[] = [...extra];
  if (!extra.some((adapter) => adapter.name === SCRIPTED_PROVIDER)) {
    const script =
      options.script ?? (options.scriptPath === undefined ? undefined : await loadScript(options.scriptPath, { signal: options.signal }));
    adapters.push(createScriptedAdapter(script === undefined ? {} : { script }));
  }
  if (adapters.length === 0) throw new InvalidInputError('the provider service needs at least one adapter');
  // Not under `config`: pino's redaction of `config.providers.*.apiKey` would hide whether a key is set.
  if (options.config) logger.info({ providerConfig: describeProviderConfig(options.config) }, 'provider configuration');
  // Embeddings: every OpenAI-compatible provider through the SDK (with retries), the scripted one by hashing;
  // Anthropic has no embeddings API, and its embed subject says so.
  const embedders = new Map<string, EmbedAdapter>([[SCRIPTED_PROVIDER, createScriptedEmbedder()]]);
  for (const settings of options.config?.providers ?? []) {
    if (settings.type !== ProviderType.openai) continue;
    const defaultModel = settings.embedModel ?? options.embedModel;
    const embedder = createOpenAIEmbedder({
      name: settings.name,
      ...(settings.apiKey === undefined ? {} : { apiKey: settings.apiKey }),
      ...(settings.baseURL === undefined ? {} : { baseURL: settings.baseURL }),
      ...(settings.headers === undefined ? {} : { defaultHeaders: settings.headers }),
      ...(settings.timeoutMs === undefined ? {} : { timeoutMs: settings.timeoutMs }),
      ...(defaultModel === undefined ? {} : { defaultModel }),
      logger,
    });
    embedders.set(settings.name, withEmbedRetries(embedder, { retry: options.config!.retry, logger }));
  }
  for (const embedder of options.embedders ?? []) embedders.set(embedder.name, embedder);
  // A stream's chunks are published from an async chain, one microtask apart: one socket write per turn of the event
  // loop instead of one per chunk (a write is most of what a scripted answer costs the provider).
  if (!coalesceWrites(options.nc)) logger.warn('this nats.js does not let the provider coalesce its socket writes; each chunk is written on its own');
  const host: ProviderHost = createProviderHost({
    nc: options.nc,
    subjects: createSubjects(options.prefix),
    codec: createCodec(),
    logger,
    adapters,
    embedders: [...embedders.values()],
    ...(options.requestTimeoutMs === undefined ? {} : { requestTimeoutMs: options.requestTimeoutMs }),
    ...(options.statsData ? { statsData: options.statsData } : {}),
    ...(options.replyPolicy ? { replyPolicy: options.replyPolicy } : {}),
    scrubber: createScrubber({ secrets: (options.config?.providers ?? []).flatMap((settings) => providerSecrets(settings.apiKey, settings.headers)), logger }),
  });
  await host.start();
  return { providers: adapters.map((adapter) => adapter.name), id: host.id, stop: () => host.stop() };
}
