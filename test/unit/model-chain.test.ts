import { describe, expect, it } from 'vitest';
import { CancelledError, InvalidInputError, ProviderError } from '../../src/errors.ts';
import { decodePrompt, createCodec } from '../../src/protocol/index.ts';
import { movesToNextModel, runModelChain, stepChain, turnModels, uniqueModels } from '../../services/runtime/models/model-chain.ts';
import type { ModelSwitch } from '../../services/runtime/models/model-chain.ts';

const codec = createCodec();
const json = (value: unknown) => new TextEncoder().encode(JSON.stringify(value));

describe('the prompt fields of models', () => {
  it('accepts models, smallModel with largeModel, and complex', () => {
    const prompt = decodePrompt(
      codec,
      json({ text: 'hi', models: ['openai:a', 'anthropic:b'], smallModel: 'ollama:s', largeModel: 'openai:l', complex: true }),
      'application/json',
    );
    expect(prompt).toMatchObject({ models: ['openai:a', 'anthropic:b'], smallModel: 'ollama:s', largeModel: 'openai:l', complex: true });
  });

  it('refuses a smallModel without a largeModel, a bad model name and an empty chain', () => {
    expect(() => decodePrompt(codec, json({ text: 'hi', smallModel: 'ollama:s' }), 'application/json')).toThrow(/largeModel/);
    expect(() => decodePrompt(codec, json({ text: 'hi', models: ['gpt-4o'] }), 'application/json')).toThrow(/<provider>:<model>/);
    expect(() => decodePrompt(codec, json({ text: 'hi', models: [] }), 'application/json')).toThrow(InvalidInputError);
  });
});

describe('turnModels', () => {
  it('uses the default model when the prompt names none', () => {
    expect(turnModels({}, 'scripted:default')).toEqual({ model: 'scripted:default' });
  });

  it('puts model first, then models in order, each once', () => {
    expect(turnModels({ model: 'openai:a', models: ['anthropic:b', 'openai:a', 'ollama:c'] }, 'scripted:default')).toEqual({
      model: 'openai:a',
      fallbackModels: ['anthropic:b', 'ollama:c'],
    });
    expect(turnModels({ models: ['anthropic:b'] }, 'scripted:default')).toEqual({ model: 'anthropic:b' });
  });

  it('starts on the small model and keeps the rest of the chain as fallbacks', () => {
    expect(turnModels({ smallModel: 'ollama:s', largeModel: 'openai:l', models: ['openai:l', 'anthropic:b'] }, 'scripted:default')).toEqual({
      model: 'ollama:s',
      escalation: { smallModel: 'ollama:s', largeModel: 'openai:l', complex: false },
      fallbackModels: ['anthropic:b'],
    });
  });
});

describe('stepChain', () => {
  const escalation = { smallModel: 'ollama:s', largeModel: 'openai:l', complex: false };

  it('tries the large model after a small one that fails, then the fallbacks', () => {
    expect(stepChain('ollama:s', { escalation, fallbackModels: ['anthropic:b'] })).toEqual(['ollama:s', 'openai:l', 'anthropic:b']);
  });

  it('does not repeat the large model when the step already runs on it', () => {
    expect(stepChain('openai:l', { escalation, fallbackModels: ['anthropic:b'] })).toEqual(['openai:l', 'anthropic:b']);
    expect(stepChain('openai:a', {})).toEqual(['openai:a']);
  });

  it('uniqueModels keeps the first of duplicates and drops undefined', () => {
    expect(uniqueModels(['a:1', undefined, 'b:2', 'a:1'])).toEqual(['a:1', 'b:2']);
  });
});

describe('movesToNextModel', () => {
  it('moves on after provider failures for good, open circuits and missing providers', () => {
    expect(movesToNextModel(new ProviderError('circuit_open', 'open'))).toBe(true);
    expect(movesToNextModel(new ProviderError('unauthorized', '401'))).toBe(true);
    expect(movesToNextModel(new ProviderError('provider_error', '500 after retries', { retryable: true }))).toBe(true);
    expect(movesToNextModel(new ProviderError('no_responders', 'nobody', { retryable: true }))).toBe(true);
  });

  it('does not move on after a cancel or input that no model would take', () => {
    expect(movesToNextModel(new CancelledError())).toBe(false);
    expect(movesToNextModel(new InvalidInputError('bad request'))).toBe(false);
  });
});

describe('runModelChain', () => {
  const signal = new AbortController().signal;

  it('returns the first model that answers and reports each switch', async () => {
    const switches: ModelSwitch[] = [];
    const tried: string[] = [];
    const result = await runModelChain({
      models: ['openai:a', 'anthropic:b', 'ollama:c'],
      signal,
      attempt: async ({ model }) => {
        tried.push(model);
        if (model === 'openai:a') throw new ProviderError('circuit_open', 'circuit open');
        return `answer from ${model}`;
      },
      onSwitch: (change) => switches.push(change),
    });
    expect(result).toEqual({ value: 'answer from anthropic:b', model: 'anthropic:b' });
    expect(tried).toEqual(['openai:a', 'anthropic:b']);
    expect(switches).toEqual([
      { from: 'openai:a', to: 'anthropic:b', attempt: 2, maxAttempts: 3, error: { code: 'circuit_open', message: 'circuit open', retryable: false } },
    ]);
  });

  it('throws the last error when every model fails', async () => {
    await expect(
      runModelChain({
        models: ['openai:a', 'anthropic:b'],
        signal,
        attempt: ({ model }) => Promise.reject(new ProviderError('provider_error', `${model} down`, { retryable: true })),
      }),
    ).rejects.toThrow('anthropic:b down');
  });

  it('does not move on once content came out', async () => {
    const tried: string[] = [];
    await expect(
      runModelChain({
        models: ['openai:a', 'anthropic:b'],
        signal,
        attempt: async ({ model, contentStarted }) => {
          tried.push(model);
          contentStarted();
          throw new ProviderError('stream_interrupted', 'cut', { retryable: true });
        },
      }),
    ).rejects.toThrow('cut');
    expect(tried).toEqual(['openai:a']);
  });

  it('does not move on when the signal is aborted', async () => {
    const controller = new AbortController();
    const tried: string[] = [];
    await expect(
      runModelChain({
        models: ['openai:a', 'anthropic:b'],
        signal: controller.signal,
        attempt: async ({ model }) => {
          tried.push(model);
          controller.abort(new CancelledError('stop'));
          throw new ProviderError('provider_error', 'failed while cancelling', { retryable: true });
        },
      }),
    ).rejects.toThrow('failed while cancelling');
    expect(tried).toEqual(['openai:a']);
  });

  it('does not move on after a cancel error', async () => {
    const tried: string[] = [];
    await expect(
      runModelChain({
        models: ['openai:a', 'anthropic:b'],
        signal,
        attempt: async ({ model }) => {
          tried.push(model);
          throw new CancelledError();
        },
      }),
    ).rejects.toBeInstanceOf(CancelledError);
    expect(tried).toEqual(['openai:a']);
  });
});
