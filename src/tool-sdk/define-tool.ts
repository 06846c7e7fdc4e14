import type { z } from 'zod';
import { InvalidInputError } from '../errors.ts';
import type { StateClient } from '../bus/state-client.ts';
import type { Logger } from '../logging.ts';
import { SafetyTier, isToken } from '../protocol/index.ts';

/** What a tool's `execute` gets besides its arguments. */
export interface ToolContext {
  /** Aborts on the caller's cancel, the request deadline, the tool's timeout or the worker stopping. */
  readonly signal: AbortSignal;
  /** Id of this call attempt. */
  readonly callId: string;
  /** Stable across retries and resumes of one logical call: key side effects on it. */
  readonly effectId: string;
  readonly tenant: string;
  readonly sessionId: string;
  readonly turnId: string;
  /** Epoch milliseconds after which the caller has given up. */
  readonly deadline: number;
  /** A child logger bound to the tool and call. */
  readonly logger: Logger;
  /**
   * The calling tenant's agent state (served by the memory service): a tool can keep what it learns across
   * calls and sessions. Calls on it take the call's signal unless given another.
   */
  readonly state: StateClient;
  /**
   * Reports progress of a long call: the runtime shows it as a `tool.progress` live event of the session.
   * Cheap and never throws; updates come faster than the caller wants are merged.
   */
  progress(update: ToolProgress): void;
  /**
   * Asks the user a question and resolves with the answer. The first time a call reaches a question it has no answer
   * to, the call is suspended: the worker replies `input_required` and the runtime logs `tool.input_requested`, waits
   * for the answer (durably: another runtime node may take over meanwhile), then calls the tool again, same
   * `effectId`, with every answer so far. So `execute` runs again from the start and must ask its questions in the
   * same order, and keep side effects after the questions (or key them on `effectId`).
   *
   * @example
   * const branch = await context.ask('Which branch should I deploy?', { schema: { type: 'string', enum: ['main', 'next'] } });
   */
  ask(question: string, options?: { readonly schema?: Readonly<Record<string, unknown>> }): Promise<unknown>;
}

/** One progress report of a running call. */
export interface ToolProgress {
  /** What the tool is doing, for people watching (one line). */
  readonly message: string;
  /** Work done so far, in the tool's own unit. */
  readonly progress?: number;
  /** Work in all, when known. */
  readonly total?: number;
}

/** A tool a worker serves. `S` is the zod schema of its arguments. */
export interface ToolDefinition<S extends z.ZodType = z.ZodType> {
  /** Tool name, one subject token: `[A-Za-z0-9_-]{1,64}`. */
  readonly name: string;
  /** What the tool does, for the model. */
  readonly description: string;
  /**
   * Schema of the arguments, checked before `execute` runs; announced as JSON Schema unless `jsonSchema` is
   * given.
   */
  readonly parameters: S;
  /**
   * The JSON Schema to announce for the arguments instead of the one derived from `parameters`: for a tool whose
   * schema comes from elsewhere as JSON Schema (an MCP server's tool). Announced as is (a top-level `$schema` is
   * dropped, as for derived schemas); it must be an object schema. `parameters` still checks the arguments, so
   * give one that agrees with it (see `jsonSchemaParameters`) or a permissive one when the tool checks its own.
   */
  readonly jsonSchema?: Readonly<Record<string, unknown>>;
  readonly tier: SafetyTier;
  /** Longest run of one call; the request deadline may cut it shorter. */
  readonly timeoutMs: number;
  /** True when running the call twice with the same `effectId` has the effect of running it once. */
  readonly idempotent: boolean;
  /**
   * Runs the tool. Returns a string or any JSON-serialisable value; throw to fail the call (an
   * `AgentbusError`'s `code` is kept, anything else becomes `tool_failed`). Must honour `context.signal`.
   */
  execute(args: z.output<S>, context: ToolContext): Promise<unknown> | unknown;
}

/** Any tool, whatever its argument schema. */
export type AnyToolDefinition = ToolDefinition<z.ZodType>;

const TIERS: ReadonlySet<string> = new Set(Object.values(SafetyTier));

/**
 * Checks a tool definition and returns it with its argument types inferred from the schema.
 *
 * @example
 * const echo = defineTool({
 *   name: 'echo',
 *   description: 'Returns its text',
 *   parameters: z.object({ text: z.string() }),
 *   tier: SafetyTier.readOnly,
 *   timeoutMs: 5_000,
 *   idempotent: true,
 *   execute: ({ text }) => text,
 * });
 */
export function defineTool<S extends z.ZodType>(definition: ToolDefinition<S>): ToolDefinition<S> {
  if (!isToken(definition.name)) {
    throw new InvalidInputError(`tool name must match [A-Za-z0-9_-]{1,64}, got ${JSON.stringify(definition.name)}`);
  }
  if (!TIERS.has(definition.tier)) {
    throw new InvalidInputError(`tool ${definition.name}: tier must be one of ${[...TIERS].join(', ')}`);
  }
  if (!Number.isFinite(definition.timeoutMs) || definition.timeoutMs <= 0) {
    throw new InvalidInputError(`tool ${definition.name}: timeoutMs must be a positive number`);
  }
  if (definition.jsonSchema !== undefined && !isObjectSchema(definition.jsonSchema)) {
    throw new InvalidInputError(`tool ${definition.name}: jsonSchema must be a JSON Schema object with type "object"`);
  }
  return definition;
}

/** A JSON Schema of an object: a plain object whose `type` is `object` (what a tool's arguments are). */
function isObjectSchema(value: unknown): value is Record<string, unknown> {
  return typeof value === 'object' && value !== null && !Array.isArray(value) && (value as { type?: unknown }).type === 'object';
}

/**
 * True when `value` is a tool definition as {@link defineTool} accepts it: a valid name, tier and timeout,
 * a description, a zod schema (and, when present, an object `jsonSchema`) and an `execute` function. For loaders that take tools from a module's exports.
 *
 * @example
 * const tools = Object.values(await import(file)).filter(isToolDefinition);
 */
export function isToolDefinition(value: unknown): value is AnyToolDefinition {
  if (typeof value !== 'object' || value === null) return false;
  const candidate = value as Partial<Record<keyof AnyToolDefinition, unknown>>;
  const parameters = candidate.parameters as { safeParse?: unknown } | null | undefined;
  return (
    isToken(candidate.name) &&
    typeof candidate.description === 'string' &&
    typeof parameters === 'object' &&
    parameters !== null &&
    typeof parameters.safeParse === 'function' &&
    typeof candidate.tier === 'string' &&
    TIERS.has(candidate.tier) &&
    typeof candidate.timeoutMs === 'number' &&
    Number.isFinite(candidate.timeoutMs) &&
    candidate.timeoutMs > 0 &&
    typeof candidate.idempotent === 'boolean' &&
    (candidate.jsonSchema === undefined || isObjectSchema(candidate.jsonSchema)) &&
    typeof candidate.execute === 'function'
  );
}
