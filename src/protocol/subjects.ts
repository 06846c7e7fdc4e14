import { InvalidInputError } from '../errors.ts';
import type { HookPhase } from './hooks.ts';

/** Default subject prefix. */
export const DEFAULT_PREFIX = 'agentbus';

/** The variable that names the bus's subject prefix. */
export const PREFIX_ENV = 'AGENTBUS_PREFIX';

/**
 * The subject prefix of a process: `AGENTBUS_PREFIX` when set and not blank, else {@link DEFAULT_PREFIX}. The one
 * place that reads it; {@link createSubjects} checks its shape.
 *
 * @example
 * const subjects = createSubjects(prefixFromEnv(process.env));
 */
export function prefixFromEnv(env: NodeJS.ProcessEnv): string {
  return env[PREFIX_ENV]?.trim() || DEFAULT_PREFIX;
}

/** A tenant or session id: one subject token of `[A-Za-z0-9_-]{1,64}`. */
export const TOKEN_PATTERN = /^[A-Za-z0-9_-]{1,64}$/;

/** What a client may send to a session (the runtime node holding its lease answers). */
export const SessionVerb = {
  prompt: 'prompt',
  cancel: 'cancel',
  steer: 'steer',
  approve: 'approve',
  /** Answers a tool's question (`tool.input_requested`). */
  input: 'input',
  /** Deletes the session: its log, its memory, its lease; its id is refused from then on. */
  delete: 'delete',
  /** Forks the session at a sequence of its log into a new session (`{ atSeq?, sessionId? }` → `{ sessionId, atSeq }`). */
  fork: 'fork',
} as const;
export type SessionVerb = (typeof SessionVerb)[keyof typeof SessionVerb];

/** True when `value` is a valid tenant, session or tool-name token. */
export function isToken(value: unknown): value is string {
  return typeof value === 'string' && TOKEN_PATTERN.test(value);
}

/** Throws an {@link InvalidInputError} unless `value` is a valid token. */
export function assertToken(value: unknown, what: string): string {
  if (!isToken(value)) {
    throw new InvalidInputError(`${what} must match ${TOKEN_PATTERN.source}, got ${JSON.stringify(value)}`);
  }
  return value;
}

/** The subject builders of one prefix. */
export interface Subjects {
  readonly prefix: string;
  session(tenant: string, sessionId: string, verb: SessionVerb): string;
  /** Every client verb of every session, for the runtime's subscription. */
  anySession(verb: SessionVerb): string;
  /** Everything of one session: verbs, log and live events. */
  sessionAll(tenant: string, sessionId: string): string;
  log(tenant: string, sessionId: string): string;
  /** Every session log; the subject filter of the log stream. */
  anyLog(): string;
  live(tenant: string, sessionId: string, type: string): string;
  /** Every live event; the subject filter of the live stream. */
  anyLive(): string;
  toolCall(name: string): string;
  toolCancel(name: string): string;
  toolQueue(name: string): string;
  /** `<prefix>.hooks.<hook>.before|after`: a tool hook's requests (request/reply, queue group {@link toolHookQueue}). */
  toolHook(hook: string, phase: HookPhase): string;
  /** `<prefix>.hooks.<hook>`: the queue group of one hook's processes, both phases. */
  toolHookQueue(hook: string): string;
  providerGenerate(provider: string): string;
  providerCancel(provider: string): string;
  /** `agentbus.provider.<provider>.embed`: texts in, one vector each out (request/reply, the provider's queue group). */
  providerEmbed(provider: string): string;
  providerQueue(provider: string): string;
  /** Parses a session subject into its parts, or returns undefined. */
  parseSession(subject: string): { tenant: string; sessionId: string; rest: string } | undefined;
}

/**
 * Creates the subject builders for a prefix (default `agentbus`).
 *
 * @example
 * const subjects = createSubjects();
 * subjects.session('default', 'chat-1', SessionVerb.prompt); // agentbus.default.sessions.chat-1.prompt
 */
export function createSubjects(prefix: string = DEFAULT_PREFIX): Subjects {
  if (!/^[A-Za-z0-9_-]+(\.[A-Za-z0-9_-]+)*$/.test(prefix)) {
    throw new InvalidInputError(`subject prefix must be dot-separated tokens, got ${JSON.stringify(prefix)}`);
  }
  const depth = prefix.split('.').length;
  const sessionBase = (tenant: string, sessionId: string) =>
    `${prefix}.${assertToken(tenant, 'tenant')}.sessions.${assertToken(sessionId, 'sessionId')}`;
  return {
    prefix,
    session: (tenant, sessionId, verb) => `${sessionBase(tenant, sessionId)}.${verb}`,
    anySession: (verb) => `${prefix}.*.sessions.*.${verb}`,
    sessionAll: (tenant, sessionId) => `${sessionBase(tenant, sessionId)}.>`,
    log: (tenant, sessionId) => `${sessionBase(tenant, sessionId)}.log`,
    anyLog: () => `${prefix}.*.sessions.*.log`,
    live: (tenant, sessionId, type) => `${sessionBase(tenant, sessionId)}.live.${type}`,
    anyLive: () => `${prefix}.*.sessions.*.live.>`,
    toolCall: (name) => `${prefix}.tools.${assertToken(name, 'tool name')}.call`,
    toolCancel: (name) => `${prefix}.tools.${assertToken(name, 'tool name')}.cancel`,
    toolQueue: (name) => `${prefix}.tools.${name}`,
    toolHook: (hook, phase) => `${prefix}.hooks.${assertToken(hook, 'hook name')}.${phase}`,
    toolHookQueue: (hook) => `${prefix}.hooks.${assertToken(hook, 'hook name')}`,
    providerGenerate: (provider) => `${prefix}.provider.${assertToken(provider, 'provider')}.generate`,
    providerCancel: (provider) => `${prefix}.provider.${assertToken(provider, 'provider')}.cancel`,
    providerEmbed: (provider) => `${prefix}.provider.${assertToken(provider, 'provider')}.embed`,
    providerQueue: (provider) => `${prefix}.provider.${provider}`,
    parseSession(subject) {
      const tokens = subject.split('.');
      const tenant = tokens[depth];
      const sessionId = tokens[depth + 2];
      if (tokens[depth + 1] !== 'sessions' || !isToken(tenant) || !isToken(sessionId)) return undefined;
      return { tenant, sessionId, rest: tokens.slice(depth + 3).join('.') };
    },
  };
}

/**
 * Stream names derived from the prefix, so two prefixes never share a stream. `leases`, `nodes` (runtime node
 * heartbeats), `tombstones` and `state` (per-tenant agent state) are key-value buckets (streams `KV_<name>`);
 * `memory` is memory's object store of index snapshots (stream `OBJ_<name>`). `ledger` is the bucket of tool outcomes
 * by `effectId` that tool workers keep for side-effecting and privileged tools.
 */
export function streamNames(prefix: string = DEFAULT_PREFIX): { log: string; live: string; leases: string; nodes: string; tombstones: string; state: string; memory: string; ledger: string; limits: string } {
  const base = prefix.toUpperCase().replace(/[^A-Z0-9_-]/g, '_');
  return {
    log: `${base}_LOG`,
    live: `${base}_LIVE`,
    leases: `${base}_LEASES`,
    nodes: `${base}_NODES`,
    tombstones: `${base}_TOMBSTONES`,
    state: `${base}_STATE`,
    memory: `${base}_MEMORY`,
    ledger: `${base}_LEDGER`,
    limits: `${base}_LIMITS`,
  };
}
