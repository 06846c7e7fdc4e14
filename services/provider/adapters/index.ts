import type { Logger } from '../../../src/logging.ts';
import type { ProviderAdapter } from '../adapter.ts';
import type { ProviderConfig, ProviderSettings } from '../config.ts';
import { ProviderType, usesJsonActions } from '../config.ts';
import { withJsonActions } from '../json-action.ts';
import { createPricing, withCost } from '../pricing.ts';
import type { Pricing } from '../pricing.ts';
import { withResilience } from '../resilience.ts';
import type { ResilienceOptions } from '../resilience.ts';
import { createAnthropicAdapter } from './anthropic.ts';
import { createOpenAIAdapter } from './openai.ts';

export { createOpenAIAdapter, toOpenAIMessages, OPENAI_BASE_URL } from './openai.ts';
export type { OpenAIAdapterOptions } from './openai.ts';
export { createAnthropicAdapter, toAnthropicMessages, AnthropicThinking, ANTHROPIC_BASE_URL, DEFAULT_ANTHROPIC_MAX_TOKENS } from './anthropic.ts';
export type { AnthropicAdapterOptions } from './anthropic.ts';
export { FinishReason, parseToolArguments } from './shared.ts';

/** Creates the bare adapter of one configured provider: no retries, no pricing, no JSON actions. */
export function createAdapter(settings: ProviderSettings, options: { logger?: Logger } = {}): ProviderAdapter {
  const logger = options.logger?.child({ provider: settings.name });
  const common = {
    name: settings.name,
    ...(settings.baseURL === undefined ? {} : { baseURL: settings.baseURL }),
    ...(settings.headers === undefined ? {} : { defaultHeaders: settings.headers }),
    ...(settings.streamFallback === undefined ? {} : { streamFallback: settings.streamFallback }),
    ...(settings.timeoutMs === undefined ? {} : { timeoutMs: settings.timeoutMs }),
    ...(logger ? { logger } : {}),
  };
  if (settings.type === ProviderType.anthropic) {
    return createAnthropicAdapter({
      ...common,
      // config.ts refuses an anthropic provider without a key.
      apiKey: settings.apiKey ?? '',
      ...(settings.defaultMaxTokens === undefined ? {} : { defaultMaxTokens: settings.defaultMaxTokens }),
      ...(settings.thinking === undefined ? {} : { thinking: settings.thinking }),
      ...(settings.structuredOutput === undefined ? {} : { structuredOutput: settings.structuredOutput }),
    });
  }
  return createOpenAIAdapter({
    ...common,
    ...(settings.apiKey === undefined ? {} : { apiKey: settings.apiKey }),
    ...(settings.maxTokensField === undefined ? {} : { maxTokensField: settings.maxTokensField }),
    ...(settings.streamUsage === undefined ? {} : { streamUsage: settings.streamUsage }),
    ...(settings.structuredOutput === undefined ? {} : { structuredOutput: settings.structuredOutput }),
  });
}

/** Options of {@link createProviderAdapters}: what varies in tests (clock, random, sleep), and the logger. */
export interface ProviderAdaptersOptions extends Pick<ResilienceOptions, 'now' | 'random' | 'sleep'> {
  readonly logger?: Logger;
  /** Prices to use instead of the defaults with the config's `pricing` on top. */
  readonly pricing?: Pricing;
}

/**
 * Creates every configured provider's adapter, composed for the provider host:
 * `withCost(withResilience(withJsonActions?(bare adapter)))`. JSON action mode sits innermost so a
 * retry repeats the whole JSON exchange; cost is outermost so `done` carries `model` and `cost`.
 *
 * @example
 * const config = await loadProviderConfig({ env: process.env, signal });
 * const adapters = createProviderAdapters(config, { logger });
 * await startProviderService({ nc, logger, adapters });
 */
export function createProviderAdapters(config: ProviderConfig, options: ProviderAdaptersOptions = {}): ProviderAdapter[] {
  const pricing = options.pricing ?? createPricing(config.pricing);
  return config.providers.map((settings) => {
    const logger = options.logger?.child({ provider: settings.name });
    // createAdapter makes its own `provider` child of the root logger.
    let adapter = createAdapter(settings, options.logger ? { logger: options.logger } : {});
    if (settings.jsonActions !== false) {
      adapter = withJsonActions(adapter, { appliesTo: (model) => usesJsonActions(settings, model), ...(logger ? { logger } : {}) });
    }
    adapter = withResilience(adapter, {
      retry: config.retry,
      circuitBreaker: config.circuitBreaker,
      ...(logger ? { logger } : {}),
      ...(options.now ? { now: options.now } : {}),
      ...(options.random ? { random: options.random } : {}),
      ...(options.sleep ? { sleep: options.sleep } : {}),
    });
    return withCost(adapter, pricing, logger ? { logger } : {});
  });
}
