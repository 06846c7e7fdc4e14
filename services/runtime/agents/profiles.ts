import { z } from 'zod';
import { InvalidInputError } from '../../../src/errors.ts';
import { MAX_DEADLINE_MS, MODEL_PATTERN, TOKEN_PATTERN } from '../../../src/protocol/index.ts';

/** The variable that holds the agent profiles: a path to a JSON file, or the JSON itself (starting with `{`). */
export const PROFILES_ENV = 'AGENTBUS_PROFILES';

const profileSchema = z.strictObject({
  /** The tenant whose sessions may run and call this profile; no other tenant sees it. */
  tenant: z.string().regex(TOKEN_PATTERN, `tenant must match ${TOKEN_PATTERN.source}`),
  /** The profile's name: the tools `agent__<name>` and `handoff__<name>`. */
  name: z.string().regex(/^[A-Za-z0-9_-]{1,48}$/, 'name must match [A-Za-z0-9_-]{1,48}'),
  /** What the calling model is told the profile does (the tools' description). */
  description: z.string().min(1).max(2000),
  /** The system prompt of the profile's steps; the runtime's when not given. */
  systemPrompt: z.string().max(100_000).optional(),
  /** The model of the profile's steps (`<provider>:<model>`); the caller's (handoff) or the runtime's default when not given. */
  model: z.string().regex(MODEL_PATTERN, 'model must be <provider>:<model>').optional(),
  /** Allow-list of the tools its steps are offered (exact names, agent tools included); all tools when not given. */
  tools: z.array(z.string().min(1).max(256)).max(256).optional(),
  /** Budgets of a child turn of this profile, each further capped by what the calling turn has left. */
  maxSteps: z.int().min(1).max(1000).optional(),
  maxCost: z.number().positive().optional(),
  deadlineMs: z.int().min(1).max(MAX_DEADLINE_MS).optional(),
  /** False: not offered as `agent__<name>`. */
  callable: z.boolean().default(true),
  /** False: not offered as `handoff__<name>`. */
  handoff: z.boolean().default(true),
});

const profilesConfigSchema = z.strictObject({ profiles: z.array(profileSchema) });

/** One agent profile: a name, a description, and what a turn run as it uses. */
export type AgentProfile = z.infer<typeof profileSchema>;

/** The profiles of every tenant, looked up per tenant only. */
export interface AgentProfiles {
  /** The tenant's profile of that name; undefined for another tenant's or an unknown one. */
  get(tenant: string, name: string): AgentProfile | undefined;
  /** The tenant's profiles, in config order. */
  list(tenant: string): readonly AgentProfile[];
}

/**
 * Validates a profiles config (`{ profiles: [...] }`), each tenant's names once. Throws {@link InvalidInputError}
 * naming the first problem.
 */
export function parseProfiles(value: unknown, source = 'profiles'): AgentProfiles {
  const parsed = profilesConfigSchema.safeParse(value);
  if (!parsed.success) {
    const issue = parsed.error.issues[0]!;
    throw new InvalidInputError(`${source}: ${issue.path.join('.') || '(top)'}: ${issue.message}`);
  }
  const byTenant = new Map<string, AgentProfile[]>();
  for (const profile of parsed.data.profiles) {
    const list = byTenant.get(profile.tenant) ?? [];
    if (list.some((other) => other.name === profile.name)) throw new InvalidInputError(`${source}: profile ${profile.tenant}/${profile.name} is listed twice`);
    list.push(profile);
    byTenant.set(profile.tenant, list);
  }
  return {
    get: (tenant, name) => byTenant.get(tenant)?.find((profile) => profile.name === name),
    list: (tenant) => byTenant.get(tenant) ?? [],
  };
}

/**
 * The profiles named by {@link PROFILES_ENV}: inline JSON when it starts with `{`, else a file read with
 * `readFile`. Undefined when the variable is not set.
 */
export function profilesFromEnv(env: NodeJS.ProcessEnv, readFile: (path: string) => string): AgentProfiles | undefined {
  const value = env[PROFILES_ENV]?.trim();
  if (!value) return undefined;
  const inline = value.startsWith('{');
  const source = inline ? PROFILES_ENV : value;
  const text = inline ? value : readFile(value);
  let json: unknown;
  try {
    // A local config file, not bus data: the codec's rule does not apply here.
    json = JSON.parse(text);
  } catch (error) {
    throw new InvalidInputError(`${source}: not JSON (${(error as Error).message})`, { cause: error });
  }
  return parseProfiles(json, source);
}
