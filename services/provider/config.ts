import { readFile } from 'node:fs/promises';
import { z } from 'zod';
import { InvalidInputError } from '../../src/errors.ts';
import { MODEL_PATTERN, TOKEN_PATTERN } from '../../src/protocol/index.ts';
import { DEFAULT_MODELS, pickDefaultModel } from '../../src/default-model.ts';
import type { PriceTable } from './pricing.ts';
import type { CircuitBreakerOptions, RetryOptions } from './resilience.ts';

export { DEFAULT_MODELS };

/** The API a provider speaks: `openai` covers every Chat Completions server (Ollama, vLLM, …). */
export const ProviderType = { openai: 'openai', anthropic: 'anthropic' } as const;
export type ProviderType = (typeof ProviderType)[keyof typeof ProviderType];

/** Where Ollama's OpenAI-compatible API listens by default. */
export const DEFAULT_OLLAMA_BASE_URL = 'http://127.0.0.1:11434/v1';

const providerSchema = z.strictObject({
  type: z.enum([ProviderType.openai, ProviderType.anthropic]),
  apiKey: z.string().min(1).optional(),
  /** The name of an environment variable holding the key, so the file itself holds no secret. */
  apiKeyEnv: z.string().min(1).optional(),
  baseURL: z.url().optional(),
  headers: z.record(z.string(), z.string()).optional(),
  maxTokensField: z.enum(['max_tokens', 'max_completion_tokens']).optional(),
  streamUsage: z.boolean().optional(),
  streamFallback: z.boolean().optional(),
  timeoutMs: z.int().positive().optional(),
  defaultMaxTokens: z.int().positive().optional(),
  /** The embedding model of `agentbus.provider.<name>.embed` when a request names none (OpenAI-compatible providers). */
  embedModel: z.string().min(1).optional(),
  /** Anthropic only: the `thinking` setting sent (default `disabled`). */
  thinking: z.enum(['disabled', 'adaptive', 'omit']).optional(),
  /**
   * Whether a request's `outputSchema` is sent as the API's native structured output (`response_format` json_schema
   * for OpenAI-compatible servers, `output_config.format` for Anthropic). Default true; false for a server that refuses
   * the field: the model then has only the runtime's instruction, and the runtime's check.
   */
  structuredOutput: z.boolean().optional(),
  /** JSON action mode: `true` for every model, or model names (`*` at the end matches a prefix). */
  jsonActions: z.union([z.boolean(), z.array(z.string().min(1))]).optional(),
});

const priceSchema = z.strictObject({ input: z.number().nonnegative(), output: z.number().nonnegative() });

const fileSchema = z.strictObject({
  defaultModel: z.string().regex(MODEL_PATTERN, 'must be <provider>:<model>').optional(),
  providers: z.record(z.string().regex(TOKEN_PATTERN, 'provider names are [A-Za-z0-9_-]{1,64}'), providerSchema).optional(),
  pricing: z.record(z.string(), priceSchema).optional(),
  retry: z
    .strictObject({
      maxAttempts: z.int().min(1).max(20),
      baseDelayMs: z.number().nonnegative(),
      maxDelayMs: z.number().nonnegative(),
      maxRetryAfterMs: z.number().nonnegative(),
    })
    .partial()
    .optional(),
  circuitBreaker: z
    .union([
      z.literal(false),
      z.strictObject({ failureThreshold: z.int().min(1), resetTimeoutMs: z.number().nonnegative(), successThreshold: z.int().min(1) }).partial(),
    ])
    .optional(),
});

/** The config file as written. */
export type ProviderConfigFile = z.input<typeof fileSchema>;

/** One configured provider, keys resolved. */
export interface ProviderSettings {
  readonly name: string;
  readonly type: ProviderType;
  readonly apiKey?: string;
  readonly baseURL?: string;
  readonly headers?: Readonly<Record<string, string>>;
  readonly maxTokensField?: 'max_tokens' | 'max_completion_tokens';
  readonly streamUsage?: boolean;
  readonly streamFallback?: boolean;
  readonly timeoutMs?: number;
  readonly defaultMaxTokens?: number;
  readonly embedModel?: string;
  readonly thinking?: 'disabled' | 'adaptive' | 'omit';
  readonly structuredOutput?: boolean;
  readonly jsonActions: boolean | readonly string[];
}

/** The provider service's configuration: file, then environment on top. */
export interface ProviderConfig {
  readonly defaultModel: string;
  readonly providers: readonly ProviderSettings[];
  readonly pricing: PriceTable;
  readonly retry: Partial<RetryOptions>;
  readonly circuitBreaker: Partial<CircuitBreakerOptions> | false;
}

type Env = Readonly<Record<string, string | undefined>>;
type RawProvider = z.output<typeof providerSchema>;

function problem(source: string, error: z.ZodError): InvalidInputError {
  const issue = error.issues[0];
  const path = issue && issue.path.length > 0 ? `${issue.path.join('.')}: ` : '';
  return new InvalidInputError(`${source}: ${path}${issue?.message ?? 'invalid'}`);
}

/** `OLLAMA_HOST` as Ollama reads it (`host:port`, with or without a scheme) turned into its `/v1` URL. */
export function ollamaBaseURL(host: string): string {
  const trimmed = host.trim();
  if (trimmed === '') return DEFAULT_OLLAMA_BASE_URL;
  const withScheme = /^[a-z][a-z0-9+.-]*:\/\//i.test(trimmed) ? trimmed : `http://${trimmed}`;
  const url = new URL(withScheme);
  // Ollama listens on 0.0.0.0 when told to; clients reach it on loopback.
  if (url.hostname === '0.0.0.0') url.hostname = '127.0.0.1';
  if (url.pathname === '/' || url.pathname === '') url.pathname = '/v1';
  return url.toString().replace(/\/$/, '');
}

/**
 * Builds the configuration from a parsed config file (or nothing) and the environment, which wins:
 * `OPENAI_API_KEY`, `OPENAI_BASE_URL`, `ANTHROPIC_API_KEY`, `ANTHROPIC_BASE_URL`, `OLLAMA_HOST`,
 * `AGENTBUS_MODEL`. With no provider configured the default model is `scripted:default`.
 * Throws {@link InvalidInputError} naming the file, field or variable that is wrong.
 */
export function resolveProviderConfig(file: unknown, env: Env = {}, source = 'provider config'): ProviderConfig {
  const parsed = fileSchema.safeParse(file ?? {});
  if (!parsed.success) throw problem(source, parsed.error);
  const providers = new Map<string, RawProvider>(Object.entries(parsed.data.providers ?? {}));
  const set = (value: string | undefined) => (value !== undefined && value.trim() !== '' ? value.trim() : undefined);
  const overlay = (name: string, type: ProviderType, patch: Partial<RawProvider>) => {
    providers.set(name, { ...(providers.get(name) ?? { type }), ...patch });
  };
  const url = (variable: string, value: string) => {
    const result = z.url().safeParse(value);
    if (!result.success) throw new InvalidInputError(`${variable} must be a URL, got ${JSON.stringify(value)}`);
    return value;
  };
  const openaiKey = set(env.OPENAI_API_KEY);
  const openaiBase = set(env.OPENAI_BASE_URL);
  if (openaiKey) overlay('openai', ProviderType.openai, { apiKey: openaiKey });
  if (openaiBase) overlay('openai', ProviderType.openai, { baseURL: url('OPENAI_BASE_URL', openaiBase) });
  const anthropicKey = set(env.ANTHROPIC_API_KEY);
  const anthropicBase = set(env.ANTHROPIC_BASE_URL);
  if (anthropicKey) overlay('anthropic', ProviderType.anthropic, { apiKey: anthropicKey });
  if (anthropicBase) overlay('anthropic', ProviderType.anthropic, { baseURL: url('ANTHROPIC_BASE_URL', anthropicBase) });
  if (env.OLLAMA_HOST !== undefined) {
    let baseURL: string;
    try {
      baseURL = ollamaBaseURL(env.OLLAMA_HOST);
    } catch (cause) {
      throw new InvalidInputError(`OLLAMA_HOST must be host:port or a URL, got ${JSON.stringify(env.OLLAMA_HOST)}`, { cause });
    }
    overlay('ollama', ProviderType.openai, { baseURL });
  }

  const settings: ProviderSettings[] = [];
  for (const [name, raw] of providers) settings.push(settle(name, raw, env, source));

  const defaultModel = set(env.AGENTBUS_MODEL) ?? parsed.data.defaultModel ?? pickDefaultModel(settings.map((provider) => provider.name));
  if (!MODEL_PATTERN.test(defaultModel)) throw new InvalidInputError(`AGENTBUS_MODEL must be <provider>:<model>, got ${JSON.stringify(defaultModel)}`);
  const defaultProvider = defaultModel.slice(0, defaultModel.indexOf(':'));
  if (defaultProvider !== 'scripted' && !settings.some((provider) => provider.name === defaultProvider)) {
    throw new InvalidInputError(
      `default model ${defaultModel} names provider "${defaultProvider}", which is not configured (configured: ${settings.map((provider) => provider.name).join(', ') || 'none'})`,
    );
  }
  return {
    defaultModel,
    providers: settings,
    pricing: parsed.data.pricing ?? {},
    retry: parsed.data.retry ?? {},
    circuitBreaker: parsed.data.circuitBreaker ?? {},
  };
}

function settle(name: string, raw: RawProvider, env: Env, source: string): ProviderSettings {
  const { apiKeyEnv, jsonActions, ...rest } = raw;
  let apiKey = raw.apiKey;
  if (apiKey === undefined && apiKeyEnv !== undefined) {
    apiKey = env[apiKeyEnv]?.trim() || undefined;
    if (apiKey === undefined) throw new InvalidInputError(`${source}: providers.${name}.apiKeyEnv names ${apiKeyEnv}, which is not set`);
  }
  const needsKey = raw.type === ProviderType.anthropic || raw.baseURL === undefined;
  if (needsKey && apiKey === undefined) {
    const hint = name === 'openai' ? ' (set OPENAI_API_KEY)' : name === 'anthropic' ? ' (set ANTHROPIC_API_KEY)' : '';
    throw new InvalidInputError(`${source}: provider "${name}" has no apiKey${hint}; a ${raw.type} provider without a baseURL needs one`);
  }
  return { ...rest, name, ...(apiKey === undefined ? {} : { apiKey }), jsonActions: jsonActions ?? false };
}

/**
 * Loads the configuration: the JSON file at `path` (or `AGENTBUS_CONFIG`), when there is one, with
 * the environment on top.
 *
 * @example
 * const config = await loadProviderConfig({ env: process.env, signal });
 */
export async function loadProviderConfig(options: { path?: string; env?: Env; signal?: AbortSignal } = {}): Promise<ProviderConfig> {
  const env = options.env ?? {};
  const path = options.path ?? (env.AGENTBUS_CONFIG?.trim() || undefined);
  if (path === undefined) return resolveProviderConfig(undefined, env);
  let text: string;
  try {
    text = await readFile(path, { encoding: 'utf8', ...(options.signal ? { signal: options.signal } : {}) });
  } catch (cause) {
    options.signal?.throwIfAborted();
    throw new InvalidInputError(`cannot read provider config ${path}: ${(cause as Error).message}`, { cause });
  }
  let file: unknown;
  try {
    file = JSON.parse(text);
  } catch (cause) {
    throw new InvalidInputError(`provider config ${path} is not JSON: ${(cause as Error).message}`, { cause });
  }
  return resolveProviderConfig(file, env, path);
}

/** True when JSON action mode applies to `model` of a provider with these settings. */
export function usesJsonActions(settings: Pick<ProviderSettings, 'jsonActions'>, model: string): boolean {
  if (typeof settings.jsonActions === 'boolean') return settings.jsonActions;
  return settings.jsonActions.some((pattern) => (pattern.endsWith('*') ? model.startsWith(pattern.slice(0, -1)) : model === pattern));
}

/** The configuration as it may be logged: keys replaced by whether they are set. */
export function describeProviderConfig(config: ProviderConfig): Record<string, unknown> {
  return {
    defaultModel: config.defaultModel,
    providers: config.providers.map(({ apiKey, headers, ...rest }) => ({
      ...rest,
      apiKey: apiKey === undefined ? 'unset' : 'set',
      ...(headers ? { headers: Object.keys(headers) } : {}),
    })),
    pricing: Object.keys(config.pricing),
    retry: config.retry,
    circuitBreaker: config.circuitBreaker,
  };
}
