import { describe, expect, it } from 'vitest';
import type { JsonSchemaCheck } from '../../src/tool-sdk/index.ts';
import { SafetyTier } from '../../src/protocol/index.ts';
import { defineTool, isToolDefinition, jsonSchemaParameters, toToolMetadata, toolParametersSchema } from '../../src/tool-sdk/index.ts';
import { runTool } from '../helpers/run-tool.ts';

const addSchema = { $schema: 'http://json-schema.org/draft-07/schema#', type: 'object', properties: { a: { type: 'number' }, b: { type: 'number' } }, required: ['a', 'b'] };

/** A stand-in for a compiled validator of addSchema. */
const check: JsonSchemaCheck = (input) => {
  const args = input as Record<string, unknown>;
  const problems = [typeof args.a === 'number' ? '' : 'a must be number', 'b' in args ? '' : "arguments must have required property 'b'"].filter(Boolean);
  return problems.length === 0 ? { valid: true } : { valid: false, errorMessage: problems.join(', ') };
};

describe('a tool with a raw JSON Schema', () => {
  const half = defineTool({
    name: 'half',
    description: 'Halves a',
    jsonSchema: addSchema,
    parameters: jsonSchemaParameters(check),
    tier: SafetyTier.readOnly,
    timeoutMs: 1000,
    idempotent: true,
    execute: (args) => Number(args.a) / 2,
  });

  it('announces the schema as it is, less $schema', () => {
    const { $schema: _draft, ...announced } = addSchema;
    expect(toolParametersSchema(half)).toEqual(announced);
    expect(JSON.parse(toToolMetadata(half).parameters)).toEqual(announced);
    expect(isToolDefinition(half)).toBe(true);
  });

  it('checks arguments against it before execute, in words about the arguments', async () => {
    expect(await runTool(half, { a: 4, b: 0 })).toMatchObject({ ok: true, output: 2 });
    const bad = await runTool(half, { a: 'four' });
    expect(bad).toMatchObject({ ok: false, error: { code: 'invalid_arguments' } });
    expect(!bad.ok && bad.error.message).toMatch(/a must be number/);
    expect(!bad.ok && bad.error.message).toMatch(/arguments must have required property 'b'/);
    expect(await runTool(half, 'not an object')).toMatchObject({ ok: false, error: { code: 'invalid_arguments' } });
  });

  it('takes any object when no check is given, and refuses a schema that is not an object schema', async () => {
    const open = defineTool({ ...half, parameters: jsonSchemaParameters() });
    expect(await runTool(open, { a: 'four' })).toMatchObject({ ok: true });
    expect(() => defineTool({ ...half, jsonSchema: { type: 'string' } })).toThrow(/jsonSchema must be a JSON Schema object/);
    expect(isToolDefinition({ ...half, jsonSchema: [] })).toBe(false);
  });
});
