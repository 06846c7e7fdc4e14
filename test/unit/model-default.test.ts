import { mkdtemp, rm, writeFile } from 'node:fs/promises';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { describe, expect, it } from 'vitest';
import { OFFLINE_MESSAGE, defaultModelOf, describeDefaultModel } from '../../src/default-model.ts';
import { resolveProviderConfig } from '../../services/provider/config.ts';

describe('the default model, as the CLI describes it', () => {
  it('is the offline scripted provider when nothing is configured', () => {
    expect(defaultModelOf({})).toEqual({ model: 'scripted:default', offline: true, source: 'nothing configured', message: OFFLINE_MESSAGE });
    expect(OFFLINE_MESSAGE).toBe('no API key or local model server configured: using the offline scripted provider');
  });

  it('names the variable that configured the provider, never its value', () => {
    const choice = defaultModelOf({ ANTHROPIC_API_KEY: 'sk-ant-secret-value', OLLAMA_HOST: '' });
    expect(choice).toEqual({
      model: 'anthropic:claude-sonnet-5',
      offline: false,
      source: 'ANTHROPIC_API_KEY',
      message: 'using anthropic:claude-sonnet-5 (ANTHROPIC_API_KEY is set)',
    });
    expect(JSON.stringify(choice)).not.toContain('secret');
    expect(defaultModelOf({ OLLAMA_HOST: '' }).model).toBe('ollama:qwen3');
  });

  it('takes AGENTBUS_MODEL first, then the file, as the provider service does', () => {
    const env = { OPENAI_API_KEY: 'sk-x', AGENTBUS_MODEL: 'anthropic:claude-haiku-4-5', ANTHROPIC_API_KEY: 'sk-ant-x' };
    expect(defaultModelOf(env).model).toBe(resolveProviderConfig(undefined, env).defaultModel);
    const file = { defaultModel: 'groq:llama', providers: { groq: { type: 'openai', baseURL: 'http://127.0.0.1:9/v1' } } };
    expect(defaultModelOf({}, file)).toMatchObject({ model: 'groq:llama', source: 'config file' });
    expect(defaultModelOf({}, file).model).toBe(resolveProviderConfig(file, {}).defaultModel);
    for (const only of [{ OPENAI_API_KEY: 'sk-x' }, { OPENAI_BASE_URL: 'http://127.0.0.1:1/v1' }, { OLLAMA_HOST: 'box:11434' }, {}]) {
      expect(defaultModelOf(only).model).toBe(resolveProviderConfig(undefined, only).defaultModel);
    }
  });

  it('says when configured providers have no default model', () => {
    const file = { providers: { groq: { type: 'openai', baseURL: 'http://127.0.0.1:9/v1' } } };
    expect(defaultModelOf({}, file)).toMatchObject({ model: 'scripted:default', offline: true, message: expect.stringContaining('set AGENTBUS_MODEL') });
  });

  it('reads the file named by AGENTBUS_CONFIG', async () => {
    const dir = await mkdtemp(join(tmpdir(), 'agentbus-config-'));
    try {
      const path = join(dir, 'agentbus.json');
      await writeFile(path, JSON.stringify({ providers: { anthropic: { type: 'anthropic', apiKeyEnv: 'MY_KEY' } } }));
      expect(await describeDefaultModel({ AGENTBUS_CONFIG: path, MY_KEY: 'k' })).toMatchObject({ model: 'anthropic:claude-sonnet-5', source: 'config file' });
      await expect(describeDefaultModel({ AGENTBUS_CONFIG: join(dir, 'missing.json') })).rejects.toThrow(/cannot read provider config/);
    } finally {
      await rm(dir, { recursive: true, force: true });
    }
  });
});
