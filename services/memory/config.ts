import { InvalidInputError } from '../../src/errors.ts';
import { isToken } from '../../src/protocol/index.ts';
import { replicasFromEnv } from '../../src/bus/streams.ts';
import { providerOfModel } from '../../src/bus/provider-client.ts';
import { parseRate } from '../../src/rate-limit.ts';
import type { Rate } from '../../src/rate-limit.ts';
import { DEFAULT_MEMORY_TENANT_RATE } from './rate-limit.ts';
import { DEFAULT_STATE_LIMITS } from './state-store.ts';
import type { StateLimits } from './state-store.ts';

/** The memory service's settings, from its environment. */
export interface MemoryConfig {
  /** The provider whose embed endpoint memory uses, or undefined for full-text search only. */
  readonly embedProvider: string | undefined;
  /** Why there is no embed provider, for the log; undefined when there is one. */
  readonly fullTextReason: string | undefined;
  readonly queryEmbedTimeoutMs: number;
  readonly snapshots: false | { readonly everyEvents: number; readonly intervalMs: number };
  /** Copies of the state bucket and the snapshot store in a NATS cluster (`AGENTBUS_REPLICAS`); default 1. */
  readonly replicas: number;
  /** Limits of agent state that are set: the bucket, one value, one tenant's values (`AGENTBUS_STATE_*`). */
  readonly state: Partial<StateLimits>;
  /** Requests per second of one tenant to memory (`AGENTBUS_MEMORY_TENANT_RATE`, `<per second>[:<burst>]`; 0: none). */
  readonly tenantRate: Rate;
}

type Env = Readonly<Record<string, string | undefined>>;

/**
 * Reads `AGENTBUS_EMBED_PROVIDER` (a provider name, or `none`; default: the provider of `AGENTBUS_MODEL`),
 * `AGENTBUS_MEMORY_QUERY_EMBED_TIMEOUT_MS` (default 200), `AGENTBUS_MEMORY_SNAPSHOT_EVENTS` (default 20000;
 * 0 turns snapshots off) and `AGENTBUS_MEMORY_SNAPSHOT_INTERVAL_MS` (default 60000), the state limits
 * `AGENTBUS_STATE_MAX_BYTES` (default 1 GiB; 0: none), `AGENTBUS_STATE_MAX_VALUE_BYTES` (default 256 KiB) and
 * `AGENTBUS_STATE_TENANT_MAX_BYTES` (default 64 MiB; 0: none), and `AGENTBUS_MEMORY_TENANT_RATE` (default 500:1000).
 * A bad value is an error that names the variable.
 */
export function memoryConfigFromEnv(env: Env): MemoryConfig {
  const configured = env.AGENTBUS_EMBED_PROVIDER?.trim();
  const model = env.AGENTBUS_MODEL?.trim();
  // `<provider>:<model>`, read as the runtime reads it when it calls the model; a bare model name is refused.
  const fromModel = model ? providerOfModel(model) : undefined;
  const provider = configured || fromModel || undefined;
  if (provider !== undefined && provider !== 'none' && !isToken(provider)) {
    throw new InvalidInputError(`${configured ? 'AGENTBUS_EMBED_PROVIDER' : 'AGENTBUS_MODEL'} must name a provider ([A-Za-z0-9_-]{1,64}) or be none, got ${JSON.stringify(provider)}`);
  }
  const everyEvents = integer(env, 'AGENTBUS_MEMORY_SNAPSHOT_EVENTS', 20_000, 0);
  return {
    embedProvider: provider === 'none' ? undefined : provider,
    fullTextReason: provider === 'none' ? 'AGENTBUS_EMBED_PROVIDER is none' : provider === undefined ? 'neither AGENTBUS_EMBED_PROVIDER nor AGENTBUS_MODEL names a provider' : undefined,
    queryEmbedTimeoutMs: integer(env, 'AGENTBUS_MEMORY_QUERY_EMBED_TIMEOUT_MS', 200, 1),
    snapshots: everyEvents === 0 ? false : { everyEvents, intervalMs: integer(env, 'AGENTBUS_MEMORY_SNAPSHOT_INTERVAL_MS', 60_000, 10) },
    replicas: replicasFromEnv(env) ?? 1,
    state: stateLimits(env),
    tenantRate: env.AGENTBUS_MEMORY_TENANT_RATE?.trim() ? rateOf('AGENTBUS_MEMORY_TENANT_RATE', env.AGENTBUS_MEMORY_TENANT_RATE) : DEFAULT_MEMORY_TENANT_RATE,
  };
}

function integer(env: Env, name: string, fallback: number, min: number): number {
  const raw = env[name]?.trim();
  if (raw === undefined || raw === '') return fallback;
  const value = Number(raw);
  if (!Number.isSafeInteger(value) || value < min) throw new InvalidInputError(`${name} must be a whole number of at least ${min}, got ${JSON.stringify(raw)}`);
  return value;
}

/** The state limits set in the environment; a default `AGENTBUS_STATE_MAX_BYTES` may be made to fit the server. */
function stateLimits(env: Env): Partial<StateLimits> {
  const limits: { -readonly [K in keyof StateLimits]?: number } = {};
  const read = (name: string, key: keyof StateLimits, min: number) => {
    if (env[name]?.trim()) limits[key] = integer(env, name, DEFAULT_STATE_LIMITS[key], min);
  };
  read('AGENTBUS_STATE_MAX_BYTES', 'bucketMaxBytes', 0);
  read('AGENTBUS_STATE_MAX_VALUE_BYTES', 'maxValueBytes', 1);
  read('AGENTBUS_STATE_TENANT_MAX_BYTES', 'tenantMaxBytes', 0);
  return limits;
}

function rateOf(name: string, raw: string): Rate {
  try {
    return parseRate(name, raw);
  } catch (err) {
    throw new InvalidInputError((err as Error).message);
  }
}
