import { readFile } from 'node:fs/promises';
import { z } from 'zod';
import { InvalidInputError } from '../../src/errors.ts';

const toolCallSchema = z.strictObject({
  name: z.string().min(1, 'name must not be empty'),
  args: z.record(z.string(), z.unknown()).default({}),
});

const responseSchema = z
  .strictObject({
    text: z.string().optional(),
    toolCalls: z.array(toolCallSchema).optional(),
    delayMs: z.number().min(0).max(600_000).optional(),
    chunkSize: z.int().min(1).optional(),
    usage: z.strictObject({ inputTokens: z.int().min(0), outputTokens: z.int().min(0) }).optional(),
    /** What the call costs, USD, as its `done` chunk says (default 0): a test's spend, without prices. */
    cost: z.number().min(0).optional(),
    error: z
      .strictObject({
        code: z.string().min(1),
        message: z.string(),
        retryable: z.boolean().optional(),
      })
      .optional(),
  })
  .refine((response) => response.text !== undefined || response.toolCalls !== undefined || response.error !== undefined, {
    message: 'a response needs text, toolCalls or error',
  });

/** The shape of a script file of the `scripted` provider. Unknown fields are refused. */
export const scriptSchema = z.strictObject({
  responses: z.array(responseSchema),
  /**
   * Responses for calls of one model, keyed by its name after `scripted:` (`"researcher": [...]` for
   * `scripted:researcher`), instead of `responses`: an agent profile's
   * child session or handoff plays its own list, with its own count per session.
   */
  models: z.record(z.string(), z.array(responseSchema)).optional(),
});

/** A script: the answers the `scripted` provider plays, one per provider call of a session. */
export type Script = z.infer<typeof scriptSchema>;
/** One scripted answer. */
export type ScriptResponse = Script['responses'][number];

function formatPath(path: readonly PropertyKey[]): string {
  let result = '';
  for (const key of path) {
    result += typeof key === 'number' ? `[${key}]` : result === '' ? String(key) : `.${String(key)}`;
  }
  return result;
}

/**
 * Validates a decoded script. Throws an {@link InvalidInputError} naming the bad entry, such as
 * `script demo.json: responses[2].toolCalls[0].name: expected string, received number`.
 */
export function parseScript(value: unknown, source = 'script'): Script {
  const result = scriptSchema.safeParse(value);
  if (result.success) return result.data;
  const problems = result.error.issues.slice(0, 5).map((issue) => {
    const path = formatPath(issue.path);
    return path === '' ? issue.message : `${path}: ${issue.message}`;
  });
  const more = result.error.issues.length > problems.length ? ` (and ${result.error.issues.length - problems.length} more)` : '';
  throw new InvalidInputError(`invalid script ${source}: ${problems.join('; ')}${more}`);
}

/**
 * Reads and validates a JSON script file.
 *
 * @example
 * const script = await loadScript('examples/demo-script.json', { signal });
 */
export async function loadScript(path: string, options: { signal?: AbortSignal } = {}): Promise<Script> {
  let text: string;
  try {
    text = await readFile(path, { encoding: 'utf8', signal: options.signal });
  } catch (cause) {
    if (options.signal?.aborted) throw cause;
    throw new InvalidInputError(`cannot read script ${path}: ${(cause as Error).message}`, { cause });
  }
  let value: unknown;
  try {
    // A local config file, not bus data: the codec's rule does not apply here.
    value = JSON.parse(text);
  } catch (cause) {
    throw new InvalidInputError(`script ${path} is not valid JSON: ${(cause as Error).message}`, { cause });
  }
  return parseScript(value, path);
}
