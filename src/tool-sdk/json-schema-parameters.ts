import { z } from 'zod';

/** What checking a value against a JSON Schema answered: valid, or not with a message saying why. */
export type JsonSchemaCheckResult = { readonly valid: true } | { readonly valid: false; readonly errorMessage: string };

/** Checks a value against one JSON Schema (a validator compiled from it: ajv or another). */
export type JsonSchemaCheck = (input: unknown) => JsonSchemaCheckResult;

/**
 * The `parameters` of a tool whose arguments are described by a JSON Schema (`ToolDefinition.jsonSchema`) rather than
 * by zod: takes any object of arguments and, given a `check` compiled from that schema, refuses what it refuses (its
 * message becomes the `invalid_arguments` answer). Without a check every object passes, and the tool checks its own.
 *
 * @example
 * const schema = { type: 'object', properties: { a: { type: 'number' } }, required: ['a'] };
 * const tool = defineTool({ name: 'half', description: 'Halves a', jsonSchema: schema, parameters: jsonSchemaParameters(check), … });
 */
export function jsonSchemaParameters(check?: JsonSchemaCheck): z.ZodType<Record<string, unknown>> {
  const object = z.record(z.string(), z.unknown());
  if (!check) return object;
  return object.superRefine((value, context) => {
    const result = check(value);
    if (!result.valid) context.addIssue({ code: 'custom', message: result.errorMessage });
  });
}
