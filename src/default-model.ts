import { readFile } from 'node:fs/promises';
import { InvalidInputError } from './errors.ts';

/** The model used when nothing names one, by the first provider configured (in this order). */
export const DEFAULT_MODELS = {
  openai: 'openai:gpt-5.4-mini',
  anthropic: 'anthropic:claude-sonnet-5',
  ollama: 'ollama:qwen3',
  scripted: 'scripted:default',
} as const;

/** The default model of a set of configured provider names: openai, then anthropic, then ollama, else scripted. */
export function pickDefaultModel(providerNames: Iterable<string>): string {
  const names = new Set(providerNames);
  for (const name of ['openai', 'anthropic', 'ollama'] as const) if (names.has(name)) return DEFAULT_MODELS[name];
  return DEFAULT_MODELS.scripted;
}

/** Which model a prompt without one gets, and why, in words a person can read. */
export interface DefaultModelDescription {
  readonly model: string;
  /** True when the offline `scripted` provider answers. */
  readonly offline: boolean;
  /** What decided it: `AGENTBUS_MODEL`, `config file`, the variable that configured the provider, or `nothing configured`. */
  readonly source: string;
  /** One line for a person, e.g. `using openai:gpt-5.4-mini (OPENAI_API_KEY is set)`. */
  readonly message: string;
}

type Env = Readonly<Record<string, string | undefined>>;

/** The message when nothing is configured. */
export const OFFLINE_MESSAGE = 'no API key or local model server configured: using the offline scripted provider';

const isSet = (value: string | undefined) => value !== undefined && value.trim() !== '';

/**
 * The default model from the environment and a parsed config file, by the same rule as the provider
 * service: `AGENTBUS_MODEL`, else the file's `defaultModel`, else the first of openai, anthropic, ollama
 * that is configured (by the file's `providers` or by `OPENAI_API_KEY`/`OPENAI_BASE_URL`,
 * `ANTHROPIC_API_KEY`/`ANTHROPIC_BASE_URL`, `OLLAMA_HOST`), else `scripted:default`. Reads no key's
 * value, only whether it is set; does not validate the file (the provider service does).
 */
export function defaultModelOf(env: Env, file?: unknown): DefaultModelDescription {
  const record = typeof file === 'object' && file !== null ? (file as Record<string, unknown>) : {};
  const describe = (model: string, source: string, why: string): DefaultModelDescription => {
    const offline = model.startsWith('scripted:');
    return { model, offline, source, message: offline && source === 'nothing configured' ? OFFLINE_MESSAGE : `using ${model} (${why})` };
  };
  if (isSet(env.AGENTBUS_MODEL)) return describe(env.AGENTBUS_MODEL!.trim(), 'AGENTBUS_MODEL', 'AGENTBUS_MODEL is set');
  if (typeof record.defaultModel === 'string') return describe(record.defaultModel, 'config file', 'defaultModel of the config file');
  const fromFile = typeof record.providers === 'object' && record.providers !== null ? Object.keys(record.providers) : [];
  const variables: Array<[string, string]> = [];
  if (isSet(env.OPENAI_API_KEY)) variables.push(['openai', 'OPENAI_API_KEY']);
  if (isSet(env.OPENAI_BASE_URL)) variables.push(['openai', 'OPENAI_BASE_URL']);
  if (isSet(env.ANTHROPIC_API_KEY)) variables.push(['anthropic', 'ANTHROPIC_API_KEY']);
  if (isSet(env.ANTHROPIC_BASE_URL)) variables.push(['anthropic', 'ANTHROPIC_BASE_URL']);
  if (env.OLLAMA_HOST !== undefined) variables.push(['ollama', 'OLLAMA_HOST']);
  const names = [...fromFile, ...variables.map(([name]) => name)];
  const model = pickDefaultModel(names);
  if (names.length === 0) return describe(model, 'nothing configured', OFFLINE_MESSAGE);
  const provider = model.slice(0, model.indexOf(':'));
  if (provider === 'scripted') {
    return describe(model, 'config file', `no default model for providers ${[...new Set(names)].join(', ')}; set AGENTBUS_MODEL`);
  }
  const variable = variables.find(([name]) => name === provider)?.[1];
  return variable ? describe(model, variable, `${variable} is set`) : describe(model, 'config file', `provider ${provider} of the config file`);
}

/**
 * The default model as the provider service will pick it: reads the config file named by
 * `AGENTBUS_CONFIG` (when set) and the environment. For the CLI, to say which model answers and to
 * give the runtime the same default (`AGENTBUS_MODEL`).
 *
 * @example
 * const choice = await describeDefaultModel(process.env);
 * if (choice.offline) process.stderr.write(`${choice.message}\n`);
 * // start the runtime with AGENTBUS_MODEL=choice.model
 */
export async function describeDefaultModel(env: Env, options: { signal?: AbortSignal } = {}): Promise<DefaultModelDescription> {
  const path = env.AGENTBUS_CONFIG?.trim();
  if (!path) return defaultModelOf(env);
  let file: unknown;
  try {
    file = JSON.parse(await readFile(path, { encoding: 'utf8', ...(options.signal ? { signal: options.signal } : {}) })) as unknown;
  } catch (cause) {
    options.signal?.throwIfAborted();
    throw new InvalidInputError(`cannot read provider config ${path}: ${(cause as Error).message}`, { cause });
  }
  return defaultModelOf(env, file);
}
