import { z } from 'zod';
import { InvalidInputError } from '../errors.ts';
import { TOKEN_PATTERN, isToken } from './subjects.ts';

/** A state key: segments of `[A-Za-z0-9_=-]` joined by `.` or `/`, at most 256 characters. */
export const STATE_KEY_PATTERN = /^[A-Za-z0-9_=-]+(?:[./][A-Za-z0-9_=-]+)*$/;
/** Largest value, msgpack-encoded. */
export const MAX_STATE_VALUE_BYTES = 256 * 1024;

const key = z.string().min(1).max(256).regex(STATE_KEY_PATTERN, 'key must be segments of [A-Za-z0-9_=-] joined by . or /');

/** `agentbus.<t>.state.save`: `{ key, value, expectedRevision? }` (0: only when the key does not exist). */
export const stateSaveSchema = z.object({ key, value: z.unknown(), expectedRevision: z.int().nonnegative().optional() }).strict();
/** `agentbus.<t>.state.load` and `.delete`: `{ key }`. */
export const stateKeySchema = z.object({ key }).strict();
export type StateSaveRequest = z.infer<typeof stateSaveSchema>;

/** Answers: save `{ ok, revision }`, load `{ found: true, value, revision, updatedAt }` or `{ found: false }`, delete `{ ok }`. */
export type StateSaveReply = { readonly ok: true; readonly revision: number };
export type StateLoadReply<T = unknown> = { readonly found: true; readonly value: T; readonly revision: number; readonly updatedAt: number } | { readonly found: false };
export type StateDeleteReply = { readonly ok: true };

/** The verbs of per-tenant state. */
export const StateVerb = { save: 'save', load: 'load', delete: 'delete' } as const;
export type StateVerb = (typeof StateVerb)[keyof typeof StateVerb];

/** Subjects of per-tenant state: `<prefix>.<t>.state.<verb>`. */
export interface StateSubjects {
  of(tenant: string, verb: StateVerb): string;
  /** `<prefix>.*.state.<verb>`, for the memory service. */
  any(verb: StateVerb): string;
  /** The tenant and verb of a state subject, or undefined when it is not one. */
  parse(subject: string): { tenant: string; verb: StateVerb } | undefined;
}

export function createStateSubjects(prefix = 'agentbus'): StateSubjects {
  const depth = prefix.split('.').length;
  return {
    of(tenant, verb) {
      if (!isToken(tenant)) throw new InvalidInputError(`tenant must match ${TOKEN_PATTERN.source}, got ${JSON.stringify(tenant)}`);
      return `${prefix}.${tenant}.state.${verb}`;
    },
    any: (verb) => `${prefix}.*.state.${verb}`,
    parse(subject) {
      const tokens = subject.split('.');
      const tenant = tokens[depth];
      const verb = tokens[depth + 2] as StateVerb;
      if (tokens.length !== depth + 3 || !isToken(tenant) || tokens[depth + 1] !== 'state' || !Object.values(StateVerb).includes(verb)) return undefined;
      return { tenant, verb };
    },
  };
}
