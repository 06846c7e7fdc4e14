import { z } from 'zod';

/**
 * What is wrong with `value` against a JSON Schema, as one line (`path: message; …`), or undefined when it matches.
 * A schema zod cannot read is not checked here (undefined): whoever runs the tool checks again.
 *
 * @example
 * jsonSchemaProblems({ type: 'object', properties: { n: { type: 'number' } }, required: ['n'] }, {}); // 'n: Invalid input…'
 */
export function jsonSchemaProblems(schema: unknown, value: unknown): string | undefined {
  let check: z.ZodType;
  try {
    check = z.fromJSONSchema(schema as Parameters<typeof z.fromJSONSchema>[0]);
  } catch {
    return undefined;
  }
  const checked = check.safeParse(value);
  if (checked.success) return undefined;
  return checked.error.issues.map((issue) => `${issue.path.length > 0 ? `${issue.path.join('.')}: ` : ''}${issue.message}`).join('; ');
}
