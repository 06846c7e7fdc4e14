import { describe, expect, it } from 'vitest';
import { DEFAULT_RUNTIME_CONFIG, runtimeConfigFromEnv } from '../../services/runtime/index.ts';

describe('tool hooks from the environment', () => {
  it('reads the chain in order, each phase apart, with the default timeout and failure mode', () => {
    expect(runtimeConfigFromEnv({ AGENTBUS_TOOL_HOOKS: 'before:policy, after:redact ,before:audit,after:policy' }).toolHooks).toEqual({
      before: ['policy', 'audit'],
      after: ['redact', 'policy'],
      timeoutMs: 2000,
      onError: 'block',
    });
    expect(runtimeConfigFromEnv({ AGENTBUS_TOOL_HOOKS: 'before:policy', AGENTBUS_TOOL_HOOK_TIMEOUT_MS: '500', AGENTBUS_TOOL_HOOK_ON_ERROR: 'continue' }).toolHooks).toEqual({
      before: ['policy'],
      after: [],
      timeoutMs: 500,
      onError: 'continue',
    });
  });

  it('has no hooks, and blocks on failure, when nothing is set', () => {
    expect(runtimeConfigFromEnv({}).toolHooks).toBeUndefined();
    expect(runtimeConfigFromEnv({ AGENTBUS_TOOL_HOOKS: '' }).toolHooks).toBeUndefined();
    expect(DEFAULT_RUNTIME_CONFIG.toolHooks).toEqual({ before: [], after: [], timeoutMs: 2000, onError: 'block' });
  });

  it.each([
    ['policy', 'AGENTBUS_TOOL_HOOKS entry 1 ("policy") must be before:<hook> or after:<hook>, as in before:policy,after:redact'],
    ['before:policy,,after:redact', 'AGENTBUS_TOOL_HOOKS entry 2 ("") must be before:<hook> or after:<hook>'],
    ['during:policy', 'AGENTBUS_TOOL_HOOKS entry 1 ("during:policy") must be before:<hook> or after:<hook>'],
    ['before:', 'AGENTBUS_TOOL_HOOKS entry 1 ("before:"): a hook name must match ^[A-Za-z0-9_-]{1,64}$'],
    ['after:red.act', 'AGENTBUS_TOOL_HOOKS entry 1 ("after:red.act"): a hook name must match'],
    ['before:policy,before:policy', 'AGENTBUS_TOOL_HOOKS entry 2 ("before:policy") lists before:policy a second time'],
  ])('refuses the chain %j by name and place', (chain, message) => {
    expect(() => runtimeConfigFromEnv({ AGENTBUS_TOOL_HOOKS: chain })).toThrow(message);
  });

  it('refuses a bad timeout or failure mode by name', () => {
    expect(() => runtimeConfigFromEnv({ AGENTBUS_TOOL_HOOKS: 'before:p', AGENTBUS_TOOL_HOOK_TIMEOUT_MS: '0' })).toThrow(
      'AGENTBUS_TOOL_HOOK_TIMEOUT_MS must be a positive whole number of milliseconds, got "0"',
    );
    expect(() => runtimeConfigFromEnv({ AGENTBUS_TOOL_HOOK_TIMEOUT_MS: '1.5s' })).toThrow('AGENTBUS_TOOL_HOOK_TIMEOUT_MS');
    expect(() => runtimeConfigFromEnv({ AGENTBUS_TOOL_HOOK_ON_ERROR: 'allow' })).toThrow('AGENTBUS_TOOL_HOOK_ON_ERROR must be block or continue, got "allow"');
  });
});
