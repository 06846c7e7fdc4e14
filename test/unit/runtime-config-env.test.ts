import { describe, expect, it } from 'vitest';
import { runtimeConfigFromEnv } from '../../services/runtime/index.ts';
import { memoryConfigFromEnv } from '../../services/memory/config.ts';

describe('runtime settings from the environment', () => {
  it('reads recall: share, timeout and k, with defaults for what is not set', () => {
    expect(runtimeConfigFromEnv({ AGENTBUS_RECALL_SHARE: '0.2' }).recall).toEqual({ share: 0.2, timeoutMs: 300, k: 5 });
    expect(runtimeConfigFromEnv({ AGENTBUS_RECALL_SHARE: '0', AGENTBUS_RECALL_TIMEOUT_MS: '800', AGENTBUS_RECALL_K: '12' }).recall).toEqual({ share: 0, timeoutMs: 800, k: 12 });
    expect(runtimeConfigFromEnv({}).recall).toBeUndefined();
  });

  it('names the variable of a bad value', () => {
    expect(() => runtimeConfigFromEnv({ AGENTBUS_RECALL_SHARE: '0.9' })).toThrow(/AGENTBUS_RECALL_SHARE must be a share of the context window from 0 \(recall off\) to 0.5, got "0.9"/);
    expect(() => runtimeConfigFromEnv({ AGENTBUS_RECALL_TIMEOUT_MS: 'soon' })).toThrow(/AGENTBUS_RECALL_TIMEOUT_MS/);
    expect(() => runtimeConfigFromEnv({ AGENTBUS_RECALL_K: '0' })).toThrow(/AGENTBUS_RECALL_K must be a whole number from 1 to 50/);
  });
});

describe('node identity and failover settings from the environment', () => {
  it('takes the ingress mode (broadcast by default) and refuses another by name', () => {
    expect(runtimeConfigFromEnv({ AGENTBUS_INGRESS: 'queue' }).ingress).toBe('queue');
    expect(runtimeConfigFromEnv({ AGENTBUS_INGRESS: 'broadcast' }).ingress).toBe('broadcast');
    expect(runtimeConfigFromEnv({}).ingress).toBeUndefined();
    expect(() => runtimeConfigFromEnv({ AGENTBUS_INGRESS: 'partition' })).toThrow(/AGENTBUS_INGRESS must be broadcast or queue, got "partition"/);
  });

  it('takes a stable node id and a lease TTL, and refuses a bad one by name', () => {
    expect(runtimeConfigFromEnv({ AGENTBUS_NODE_ID: 'node-a', AGENTBUS_LEASE_TTL_MS: '1500' })).toMatchObject({ nodeId: 'node-a', leaseTtlMs: 1500 });
    expect(runtimeConfigFromEnv({}).nodeId).toBeUndefined();
    expect(() => runtimeConfigFromEnv({ AGENTBUS_NODE_ID: 'a.b' })).toThrow(/AGENTBUS_NODE_ID must match \[A-Za-z0-9_-\]\{1,64\}, got "a.b"/);
    expect(() => runtimeConfigFromEnv({ AGENTBUS_LEASE_TTL_MS: '0' })).toThrow(/AGENTBUS_LEASE_TTL_MS must be a positive integer/);
  });

  it('takes a bound of the result ledger in bytes, none by default, and refuses a bad one by name', () => {
    expect(runtimeConfigFromEnv({ AGENTBUS_LEDGER_MAX_BYTES: '1073741824', AGENTBUS_LEDGER_TTL_MS: '3600000' })).toMatchObject({ ledgerMaxBytes: 1073741824, ledgerTtlMs: 3600000 });
    expect(runtimeConfigFromEnv({}).ledgerMaxBytes).toBeUndefined();
    expect(() => runtimeConfigFromEnv({ AGENTBUS_LEDGER_MAX_BYTES: '1GB' })).toThrow(/AGENTBUS_LEDGER_MAX_BYTES must be a positive integer, got "1GB"/);
  });

  it('takes the replicas of the streams and buckets for a cluster, 1 to 5, for the runtime and memory alike', () => {
    expect(runtimeConfigFromEnv({ AGENTBUS_REPLICAS: '3' }).replicas).toBe(3);
    expect(runtimeConfigFromEnv({}).replicas).toBeUndefined();
    expect(memoryConfigFromEnv({ AGENTBUS_REPLICAS: '3' }).replicas).toBe(3);
    expect(memoryConfigFromEnv({}).replicas).toBe(1);
    for (const bad of ['0', '6', '2.5', 'three']) {
      expect(() => runtimeConfigFromEnv({ AGENTBUS_REPLICAS: bad })).toThrow(`AGENTBUS_REPLICAS must be a whole number from 1 to 5, got "${bad}"`);
    }
  });
});

describe('operator ceilings from the environment', () => {
  it('takes a steps ceiling (default 32) and a cost ceiling (none by default)', () => {
    expect(runtimeConfigFromEnv({}).ceilings).toBeUndefined();
    expect(runtimeConfigFromEnv({ AGENTBUS_MAX_COST_CEILING: '0.5' }).ceilings).toEqual({ maxSteps: 32, maxCost: 0.5 });
    expect(runtimeConfigFromEnv({ AGENTBUS_MAX_STEPS_CEILING: '64', AGENTBUS_MAX_STEPS: '40' })).toMatchObject({ maxSteps: 40, ceilings: { maxSteps: 64 } });
  });

  it('refuses a bad ceiling by name, and a default maxSteps above the ceiling', () => {
    for (const bad of ['0', '1001', '2.5', 'lots']) {
      expect(() => runtimeConfigFromEnv({ AGENTBUS_MAX_STEPS_CEILING: bad })).toThrow(`AGENTBUS_MAX_STEPS_CEILING must be a whole number from 1 to 1000, got "${bad}"`);
    }
    for (const bad of ['0', '-1', 'cheap', 'Infinity']) {
      expect(() => runtimeConfigFromEnv({ AGENTBUS_MAX_COST_CEILING: bad })).toThrow(`AGENTBUS_MAX_COST_CEILING must be a positive number of USD, got "${bad}"`);
    }
    expect(() => runtimeConfigFromEnv({ AGENTBUS_MAX_STEPS: '10', AGENTBUS_MAX_STEPS_CEILING: '8' })).toThrow('AGENTBUS_MAX_STEPS (10) is above AGENTBUS_MAX_STEPS_CEILING (8)');
    // A ceiling below the built-in default of 8 is no error: the default gives way (at start).
    expect(runtimeConfigFromEnv({ AGENTBUS_MAX_STEPS_CEILING: '4' })).toMatchObject({ ceilings: { maxSteps: 4 } });
    expect(runtimeConfigFromEnv({ AGENTBUS_MAX_STEPS_CEILING: '4' }).maxSteps).toBeUndefined();
  });

  it('raises an unset steps ceiling to an AGENTBUS_MAX_STEPS above it, with one warning (it started before the ceiling)', () => {
    const warnings: string[] = [];
    const logger = { warn: (_fields: object, message: string) => void warnings.push(message) };
    expect(runtimeConfigFromEnv({ AGENTBUS_MAX_STEPS: '40' }, logger)).toMatchObject({ maxSteps: 40, ceilings: { maxSteps: 40 } });
    expect(warnings).toEqual(['AGENTBUS_MAX_STEPS (40) is above the default steps ceiling (32): the ceiling is raised to 40; set AGENTBUS_MAX_STEPS_CEILING to choose it']);
    // A cost ceiling alone does not set the steps ceiling; it is kept.
    expect(runtimeConfigFromEnv({ AGENTBUS_MAX_STEPS: '50', AGENTBUS_MAX_COST_CEILING: '0.5' }, logger).ceilings).toEqual({ maxSteps: 50, maxCost: 0.5 });
    expect(warnings).toHaveLength(2);
    // At or below the default ceiling: nothing raised, nothing said.
    expect(runtimeConfigFromEnv({ AGENTBUS_MAX_STEPS: '32' }, logger).ceilings).toBeUndefined();
    expect(warnings).toHaveLength(2);
    // A ceiling set explicitly stays the operator's word.
    expect(() => runtimeConfigFromEnv({ AGENTBUS_MAX_STEPS: '40', AGENTBUS_MAX_STEPS_CEILING: '32' }, logger)).toThrow('AGENTBUS_MAX_STEPS (40) is above AGENTBUS_MAX_STEPS_CEILING (32)');
    expect(warnings).toHaveLength(2);
  });
});

describe('stream limits from the environment', () => {
  it('takes the log and live limits that are set (the rest keep their defaults), and refuses a bad one by name', () => {
    expect(runtimeConfigFromEnv({}).streamLimits).toBeUndefined();
    expect(runtimeConfigFromEnv({ AGENTBUS_LOG_MAX_BYTES: '1073741824', AGENTBUS_LOG_MAX_SESSION_EVENTS: '0' }).streamLimits).toEqual({ logMaxBytes: 1073741824, logMaxSessionEvents: 0 });
    expect(runtimeConfigFromEnv({ AGENTBUS_LOG_MAX_EVENT_BYTES: '65536', AGENTBUS_LIVE_MAX_BYTES: '1048576' }).streamLimits).toEqual({ maxEventBytes: 65536, liveMaxBytes: 1048576 });
    expect(() => runtimeConfigFromEnv({ AGENTBUS_LOG_MAX_BYTES: '10GB' })).toThrow(/AGENTBUS_LOG_MAX_BYTES must be a whole number from 0 to/);
    expect(() => runtimeConfigFromEnv({ AGENTBUS_LOG_MAX_EVENT_BYTES: '100' })).toThrow(/AGENTBUS_LOG_MAX_EVENT_BYTES must be a whole number from 1024 to 67108864, got "100"/);
  });
});

describe('memory settings from the environment', () => {
  it('reads the state limits and the tenant request rate, with defaults, and names the variable of a bad value', () => {
    expect(memoryConfigFromEnv({})).toMatchObject({ state: {}, tenantRate: { perSecond: 500, burst: 1000 } });
    expect(
      memoryConfigFromEnv({ AGENTBUS_STATE_MAX_BYTES: '0', AGENTBUS_STATE_MAX_VALUE_BYTES: '4096', AGENTBUS_STATE_TENANT_MAX_BYTES: '1048576', AGENTBUS_MEMORY_TENANT_RATE: '50' }),
    ).toMatchObject({ state: { bucketMaxBytes: 0, maxValueBytes: 4096, tenantMaxBytes: 1048576 }, tenantRate: { perSecond: 50, burst: 100 } });
    expect(memoryConfigFromEnv({ AGENTBUS_MEMORY_TENANT_RATE: '20:5' }).tenantRate).toEqual({ perSecond: 20, burst: 5 });
    expect(() => memoryConfigFromEnv({ AGENTBUS_STATE_TENANT_MAX_BYTES: '1MB' })).toThrow('AGENTBUS_STATE_TENANT_MAX_BYTES must be a whole number of at least 0, got "1MB"');
    expect(() => memoryConfigFromEnv({ AGENTBUS_STATE_MAX_VALUE_BYTES: '0' })).toThrow(/AGENTBUS_STATE_MAX_VALUE_BYTES/);
    expect(() => memoryConfigFromEnv({ AGENTBUS_MEMORY_TENANT_RATE: 'fast' })).toThrow(/AGENTBUS_MEMORY_TENANT_RATE must be <requests per second> or <requests per second>:<burst>/);
  });

  it('embeds with the provider of the default model unless told otherwise, or not at all', () => {
    expect(memoryConfigFromEnv({ AGENTBUS_MODEL: 'openai:gpt-5.4-mini' })).toMatchObject({ embedProvider: 'openai', fullTextReason: undefined });
    expect(memoryConfigFromEnv({ AGENTBUS_MODEL: 'openai:x', AGENTBUS_EMBED_PROVIDER: 'ollama' }).embedProvider).toBe('ollama');
    expect(memoryConfigFromEnv({ AGENTBUS_EMBED_PROVIDER: 'none', AGENTBUS_MODEL: 'openai:x' })).toMatchObject({ embedProvider: undefined, fullTextReason: 'AGENTBUS_EMBED_PROVIDER is none' });
    expect(memoryConfigFromEnv({}).embedProvider).toBeUndefined();
  });

  it('reads snapshot settings, 0 events turning snapshots off, and names the variable of a bad value', () => {
    expect(memoryConfigFromEnv({}).snapshots).toEqual({ everyEvents: 20_000, intervalMs: 60_000 });
    expect(memoryConfigFromEnv({ AGENTBUS_MEMORY_SNAPSHOT_EVENTS: '0' }).snapshots).toBe(false);
    expect(() => memoryConfigFromEnv({ AGENTBUS_MEMORY_SNAPSHOT_INTERVAL_MS: '-5' })).toThrow(/AGENTBUS_MEMORY_SNAPSHOT_INTERVAL_MS must be a whole number of at least 10, got "-5"/);
    expect(() => memoryConfigFromEnv({ AGENTBUS_EMBED_PROVIDER: 'no such!' })).toThrow(/AGENTBUS_EMBED_PROVIDER must name a provider/);
    // A default model without its provider names none: refused as the runtime refuses it, not taken as a provider.
    expect(() => memoryConfigFromEnv({ AGENTBUS_MODEL: 'gpt-4o' })).toThrow(/model must be <provider>:<model>, got "gpt-4o"/);
  });
});
