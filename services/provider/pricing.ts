import type { Logger } from '../../src/logging.ts';
import { ZERO_USAGE, addUsage } from '../../src/protocol/index.ts';
import type { ChunkBody, Usage } from '../../src/protocol/index.ts';
import type { ProviderAdapter } from './adapter.ts';

/** The price of a model in USD per million tokens. */
export interface ModelPrice {
  readonly input: number;
  readonly output: number;
}

/**
 * Prices by model name. Keys are `<provider>:<model>`; a key ending in `*` matches every model that
 * starts with the rest (`anthropic:claude-sonnet-4*`, `ollama:*`). The longest matching key wins.
 */
export type PriceTable = Readonly<Record<string, ModelPrice>>;

/**
 * List prices (USD per million tokens, standard tier, no caching discounts) as published by the
 * vendors when this table was written. They change: override them in the config's `pricing`.
 * Models that run locally cost nothing.
 */
export const DEFAULT_PRICES: PriceTable = Object.freeze({
  'openai:gpt-5.5*': { input: 5, output: 30 },
  'openai:gpt-5.4*': { input: 2.5, output: 15 },
  'openai:gpt-5.4-mini*': { input: 0.75, output: 4.5 },
  'openai:gpt-5': { input: 1.25, output: 10 },
  'openai:gpt-5-mini': { input: 0.25, output: 2 },
  'openai:gpt-5-nano': { input: 0.05, output: 0.4 },
  'openai:gpt-4.1': { input: 2, output: 8 },
  'openai:gpt-4.1-mini': { input: 0.4, output: 1.6 },
  'openai:gpt-4.1-nano': { input: 0.1, output: 0.4 },
  'openai:gpt-4o': { input: 2.5, output: 10 },
  'openai:gpt-4o-mini': { input: 0.15, output: 0.6 },
  'openai:o3': { input: 2, output: 8 },
  'openai:o4-mini': { input: 1.1, output: 4.4 },
  'anthropic:claude-sonnet-5*': { input: 3, output: 15 },
  'anthropic:claude-opus-4-8*': { input: 5, output: 25 },
  'anthropic:claude-opus-4-7*': { input: 5, output: 25 },
  'anthropic:claude-opus-4-6*': { input: 5, output: 25 },
  'anthropic:claude-opus-4-5*': { input: 5, output: 25 },
  'anthropic:claude-opus-4*': { input: 15, output: 75 },
  'anthropic:claude-sonnet-4*': { input: 3, output: 15 },
  'anthropic:claude-3-7-sonnet*': { input: 3, output: 15 },
  'anthropic:claude-haiku-4-5*': { input: 1, output: 5 },
  'anthropic:claude-3-5-haiku*': { input: 0.8, output: 4 },
  'ollama:*': { input: 0, output: 0 },
  'scripted:*': { input: 0, output: 0 },
});

/** Looks up prices and turns usage into cost. */
export interface Pricing {
  /** The price of `<provider>:<model>`, or undefined when the table does not know it. */
  priceOf(model: string): ModelPrice | undefined;
  /** The cost in USD of `usage` on `model`; 0 for an unknown model. */
  costOf(model: string, usage: Usage): number;
}

/**
 * Creates a price lookup over {@link DEFAULT_PRICES} with `overrides` on top (the config's `pricing`).
 *
 * @example
 * const pricing = createPricing({ 'vllm:llama-3.3-70b': { input: 0.2, output: 0.6 } });
 * pricing.costOf('vllm:llama-3.3-70b', { inputTokens: 1000, outputTokens: 200 }); // 0.00032
 */
export function createPricing(overrides: PriceTable = {}, defaults: PriceTable = DEFAULT_PRICES): Pricing {
  const table: PriceTable = { ...defaults, ...overrides };
  const priceOf = (model: string): ModelPrice | undefined => {
    const exact = table[model];
    if (exact) return exact;
    let best: { length: number; price: ModelPrice } | undefined;
    for (const [key, price] of Object.entries(table)) {
      if (!key.endsWith('*')) continue;
      const prefix = key.slice(0, -1);
      if (model.startsWith(prefix) && (best === undefined || prefix.length > best.length)) best = { length: prefix.length, price };
    }
    return best?.price;
  };
  return {
    priceOf,
    costOf: (model, usage) => {
      const price = priceOf(model);
      return price ? priceUsage(price, usage) : 0;
    },
  };
}

/** The cost in USD of `usage` at `price`. */
function priceUsage(price: ModelPrice, usage: Usage): number {
  return (usage.inputTokens * price.input + usage.outputTokens * price.output) / 1_000_000;
}

/**
 * The cost in USD of `usage` on `model` (`<provider>:<model>`) with the default prices, or with
 * `table` on top of them.
 */
export function costOf(model: string, usage: Usage, table: PriceTable = {}): number {
  return createPricing(table).costOf(model, usage);
}

/**
 * Wraps an adapter so that its `done` chunk carries `model` (`<provider>:<model>`) and `cost` (USD,
 * from the usage chunks it saw). An unknown model costs 0 and is logged at warn once.
 */
export function withCost(adapter: ProviderAdapter, pricing: Pricing, options: { logger?: Logger } = {}): ProviderAdapter {
  const warned = new Set<string>();
  return {
    name: adapter.name,
    ...(adapter.circuit ? { circuit: adapter.circuit } : {}),
    async *generate(request, { signal }) {
      const model = `${adapter.name}:${request.model}`;
      let usage = ZERO_USAGE;
      for await (const chunk of adapter.generate(request, { signal })) {
        if (chunk.type === 'usage') usage = addUsage(usage, chunk.usage);
        if (chunk.type !== 'done') {
          yield chunk;
          continue;
        }
        if (pricing.priceOf(model) === undefined && !warned.has(model)) {
          warned.add(model);
          options.logger?.warn({ model }, 'no price known for this model: its cost counts as 0; add it to the pricing config');
        }
        const done: ChunkBody = { ...chunk, model, cost: pricing.costOf(model, usage) };
        yield done;
      }
    },
  };
}
