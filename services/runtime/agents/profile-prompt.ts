import { InvalidInputError } from '../../../src/errors.ts';
import type { Prompt } from '../../../src/protocol/index.ts';
import type { AgentProfiles } from './profiles.ts';

/**
 * A prompt that names a `profile`: refused unless the profile is the tenant's, else given the profile's model and
 * budgets where the prompt names none. A prompt without one is returned as it is.
 *
 * @example
 * withProfile({ text: 'Summarize', profile: 'researcher' }, profiles, 'acme'); // model, maxSteps… of acme's researcher
 */
export function withProfile(prompt: Prompt, profiles: AgentProfiles | undefined, tenant: string): Prompt {
  if (prompt.profile === undefined) return prompt;
  const profile = profiles?.get(tenant, prompt.profile);
  if (!profile) throw new InvalidInputError(`profile: no agent profile ${JSON.stringify(prompt.profile)} in tenant ${tenant}`);
  return {
    ...prompt,
    ...(prompt.model === undefined && prompt.smallModel === undefined && profile.model !== undefined ? { model: profile.model } : {}),
    ...(prompt.maxSteps === undefined && profile.maxSteps !== undefined ? { maxSteps: profile.maxSteps } : {}),
    ...(prompt.maxCost === undefined && profile.maxCost !== undefined ? { maxCost: profile.maxCost } : {}),
    ...(prompt.deadlineMs === undefined && profile.deadlineMs !== undefined ? { deadlineMs: profile.deadlineMs } : {}),
  };
}
