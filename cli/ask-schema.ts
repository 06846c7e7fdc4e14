import { readFile } from 'node:fs/promises';
import { resolve } from 'node:path';
import { InvalidInputError } from '../src/errors.ts';
import { MAX_OUTPUT_SCHEMA_CHARS } from '../src/protocol/index.ts';
import { UsageError } from './context.ts';

/**
 * Reads `agentbus ask --schema FILE`: a JSON Schema whose root is `{ "type": "object", … }`, checked here as the
 * runtime checks it (size, a valid schema), so a bad file is refused with its name before anything starts. The
 * validator is loaded only when a schema is given.
 */
export async function readOutputSchema(path: string, cwd: string): Promise<Record<string, unknown>> {
  const what = `--schema ${path}`;
  let raw: string;
  try {
    raw = await readFile(resolve(cwd, path), 'utf8');
  } catch (error) {
    throw new UsageError(`${what}: cannot be read (${(error as NodeJS.ErrnoException).code ?? (error as Error).message})`);
  }
  let value: unknown;
  try {
    value = JSON.parse(raw);
  } catch (error) {
    throw new UsageError(`${what} is not JSON: ${(error as Error).message}`);
  }
  if (typeof value !== 'object' || value === null || Array.isArray(value) || (value as Record<string, unknown>).type !== 'object') {
    throw new UsageError(`${what} must be a JSON Schema object whose "type" is "object"`);
  }
  const schema = value as Record<string, unknown>;
  if (JSON.stringify(schema).length > MAX_OUTPUT_SCHEMA_CHARS) throw new UsageError(`${what} is larger than ${MAX_OUTPUT_SCHEMA_CHARS} characters as JSON`);
  const { compileOutputSchema } = await import('../src/output-schema.ts');
  try {
    await compileOutputSchema(schema);
  } catch (error) {
    if (error instanceof InvalidInputError) throw new UsageError(`${what}: ${error.message}`);
    throw error;
  }
  return schema;
}
