import { describe, expect, it } from 'vitest';
import type { ChunkBody } from '../../src/protocol/index.ts';
import type { ProviderAdapter } from '../../services/provider/adapter.ts';
import { DEFAULT_PRICES, costOf, createPricing, withCost } from '../../services/provider/pricing.ts';

describe('pricing', () => {
  it('prices usage in USD per million tokens', () => {
    expect(costOf('openai:gpt-4o-mini', { inputTokens: 1_000_000, outputTokens: 1_000_000 })).toBeCloseTo(0.75, 10);
    expect(costOf('openai:gpt-4o', { inputTokens: 2000, outputTokens: 500 })).toBeCloseTo(0.01, 10);
  });

  it('matches dated model names by prefix, the longest prefix winning', () => {
    const pricing = createPricing();
    expect(pricing.priceOf('anthropic:claude-sonnet-4-5-20250929')).toEqual({ input: 3, output: 15 });
    expect(pricing.priceOf('anthropic:claude-opus-4-5-20251101')).toEqual({ input: 5, output: 25 });
    expect(pricing.priceOf('anthropic:claude-opus-4-1-20250805')).toEqual({ input: 15, output: 75 });
    expect(pricing.priceOf('openai:gpt-5.4-mini-2026-03-17')).toEqual({ input: 0.75, output: 4.5 });
    expect(pricing.priceOf('openai:gpt-5.4')).toEqual({ input: 2.5, output: 15 });
  });

  it('lets the config override and extend the table', () => {
    const pricing = createPricing({ 'openai:gpt-4o': { input: 1, output: 1 }, 'local:*': { input: 0.01, output: 0.02 } });
    expect(pricing.costOf('openai:gpt-4o', { inputTokens: 1_000_000, outputTokens: 0 })).toBe(1);
    expect(pricing.costOf('local:llama3', { inputTokens: 1_000_000, outputTokens: 1_000_000 })).toBeCloseTo(0.03, 10);
  });

  it('costs nothing for local and unknown models', () => {
    expect(costOf('ollama:qwen3', { inputTokens: 10_000, outputTokens: 10_000 })).toBe(0);
    expect(costOf('mystery:model', { inputTokens: 10_000, outputTokens: 10_000 })).toBe(0);
    expect(createPricing().priceOf('mystery:model')).toBeUndefined();
    expect(DEFAULT_PRICES['scripted:*']).toEqual({ input: 0, output: 0 });
  });

  it('puts model and cost on the done chunk of a wrapped adapter', async () => {
    const inner: ProviderAdapter = {
      name: 'openai',
      async *generate() {
        yield { type: 'text-delta', text: 'hi' };
        yield { type: 'usage', usage: { inputTokens: 1000, outputTokens: 1000 } };
        yield { type: 'done', finishReason: 'stop' };
      },
    };
    const chunks: ChunkBody[] = [];
    const adapter = withCost(inner, createPricing());
    for await (const chunk of adapter.generate({ requestId: 'r', model: 'gpt-4o-mini', messages: [], tools: [] }, { signal: new AbortController().signal })) {
      chunks.push(chunk);
    }
    expect(chunks.at(-1)).toEqual({ type: 'done', finishReason: 'stop', model: 'openai:gpt-4o-mini', cost: (1000 * 0.15 + 1000 * 0.6) / 1e6 });
  });
});
