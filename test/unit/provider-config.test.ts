import { mkdtemp, writeFile } from 'node:fs/promises';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { describe, expect, it } from 'vitest';
import { InvalidInputError } from '../../src/errors.ts';
import {
  DEFAULT_OLLAMA_BASE_URL,
  describeProviderConfig,
  loadProviderConfig,
  ollamaBaseURL,
  resolveProviderConfig,
  usesJsonActions,
} from '../../services/provider/config.ts';

async function writeConfig(value: unknown): Promise<string> {
  const folder = await mkdtemp(join(tmpdir(), 'agentbus-config-'));
  const path = join(folder, 'agentbus.json');
  await writeFile(path, typeof value === 'string' ? value : JSON.stringify(value));
  return path;
}

describe('provider config', () => {
  it('defaults to the scripted model when no key and no local server is configured', () => {
    const config = resolveProviderConfig(undefined, {});
    expect(config.defaultModel).toBe('scripted:default');
    expect(config.providers).toEqual([]);
  });

  it('configures OpenAI, Anthropic and Ollama from the environment', () => {
    const config = resolveProviderConfig(undefined, {
      OPENAI_API_KEY: 'sk-openai',
      ANTHROPIC_API_KEY: 'sk-ant',
      ANTHROPIC_BASE_URL: 'http://127.0.0.1:9999',
      OLLAMA_HOST: '',
    });
    expect(config.providers).toEqual([
      { name: 'openai', type: 'openai', apiKey: 'sk-openai', jsonActions: false },
      { name: 'anthropic', type: 'anthropic', apiKey: 'sk-ant', baseURL: 'http://127.0.0.1:9999', jsonActions: false },
      { name: 'ollama', type: 'openai', baseURL: DEFAULT_OLLAMA_BASE_URL, jsonActions: false },
    ]);
    expect(config.defaultModel).toBe('openai:gpt-5.4-mini');
  });

  it('picks a local model when only Ollama is there', () => {
    expect(resolveProviderConfig(undefined, { OLLAMA_HOST: '0.0.0.0:11434' }).defaultModel).toBe('ollama:qwen3');
  });

  it('reads OLLAMA_HOST as Ollama does', () => {
    expect(ollamaBaseURL('')).toBe('http://127.0.0.1:11434/v1');
    expect(ollamaBaseURL('gpu-box:11434')).toBe('http://gpu-box:11434/v1');
    expect(ollamaBaseURL('https://ollama.example/v1')).toBe('https://ollama.example/v1');
  });

  it('lets the environment win over the file', async () => {
    const path = await writeConfig({
      defaultModel: 'anthropic:claude-haiku-4-5',
      providers: {
        openai: { type: 'openai', apiKey: 'sk-from-file', baseURL: 'http://127.0.0.1:1/v1' },
        anthropic: { type: 'anthropic', apiKey: 'sk-ant-file' },
      },
      pricing: { 'openai:my-model': { input: 1, output: 2 } },
      retry: { maxAttempts: 2 },
      circuitBreaker: { failureThreshold: 3 },
    });
    const config = await loadProviderConfig({
      env: { AGENTBUS_CONFIG: path, OPENAI_API_KEY: 'sk-from-env', AGENTBUS_MODEL: 'openai:gpt-4o-mini' },
    });
    expect(config.providers.find((provider) => provider.name === 'openai')).toMatchObject({
      apiKey: 'sk-from-env',
      baseURL: 'http://127.0.0.1:1/v1',
    });
    expect(config.providers.find((provider) => provider.name === 'anthropic')?.apiKey).toBe('sk-ant-file');
    expect(config.defaultModel).toBe('openai:gpt-4o-mini');
    expect(config.pricing).toEqual({ 'openai:my-model': { input: 1, output: 2 } });
    expect(config.retry).toEqual({ maxAttempts: 2 });
    expect(config.circuitBreaker).toEqual({ failureThreshold: 3 });
  });

  it('takes the file default model when the environment names none', async () => {
    const path = await writeConfig({ defaultModel: 'local:llama3', providers: { local: { type: 'openai', baseURL: 'http://127.0.0.1:8080/v1' } } });
    expect((await loadProviderConfig({ path })).defaultModel).toBe('local:llama3');
  });

  it('reads a key from the variable apiKeyEnv names', () => {
    const config = resolveProviderConfig(
      { providers: { groq: { type: 'openai', baseURL: 'https://api.groq.com/openai/v1', apiKeyEnv: 'GROQ_API_KEY' } } },
      { GROQ_API_KEY: 'gsk-123' },
    );
    expect(config.providers[0]?.apiKey).toBe('gsk-123');
  });

  it('names the field that is wrong', async () => {
    const path = await writeConfig({ providers: { openai: { type: 'openai', apiKey: 'k', baseUrl: 'http://x' } } });
    await expect(loadProviderConfig({ path })).rejects.toThrow(/providers\.openai/);
    await expect(loadProviderConfig({ path })).rejects.toBeInstanceOf(InvalidInputError);
  });

  it('says when a provider needs a key', () => {
    expect(() => resolveProviderConfig({ providers: { anthropic: { type: 'anthropic' } } }, {})).toThrow(/ANTHROPIC_API_KEY/);
  });

  it('refuses a default model whose provider is not configured', () => {
    expect(() => resolveProviderConfig(undefined, { AGENTBUS_MODEL: 'openai:gpt-4o' })).toThrow(/not configured/);
  });

  it('refuses a bad URL in the environment and a file that is not JSON', async () => {
    expect(() => resolveProviderConfig(undefined, { OPENAI_API_KEY: 'k', OPENAI_BASE_URL: 'not a url' })).toThrow(/OPENAI_BASE_URL/);
    await expect(loadProviderConfig({ path: await writeConfig('{ nope') })).rejects.toThrow(/not JSON/);
    await expect(loadProviderConfig({ path: '/nonexistent/agentbus.json' })).rejects.toThrow(/cannot read/);
  });

  it('matches JSON action models by name or prefix', () => {
    expect(usesJsonActions({ jsonActions: ['llama2', 'phi*'] }, 'phi3:mini')).toBe(true);
    expect(usesJsonActions({ jsonActions: ['llama2', 'phi*'] }, 'llama2:7b')).toBe(false);
    expect(usesJsonActions({ jsonActions: true }, 'anything')).toBe(true);
  });

  it('describes itself without the keys', () => {
    const config = resolveProviderConfig(undefined, { OPENAI_API_KEY: 'sk-secret-value' });
    expect(JSON.stringify(describeProviderConfig(config))).not.toContain('sk-secret-value');
  });
});
