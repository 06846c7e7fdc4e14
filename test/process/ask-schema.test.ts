import { mkdtemp, rm, writeFile } from 'node:fs/promises';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { parseAsk } from '../../cli/ask.ts';
import { UsageError } from '../../cli/context.ts';
import { offlineEnv, runAgentbus } from '../helpers/agentbus-bin.ts';

// `agentbus ask --schema FILE` as a user runs it: the real binary, which starts its own embedded stack (nats-server,
// runtime, provider, tools) for the command, with the scripted provider playing AGENTBUS_SCRIPT.

let dir: string;
const schema = { type: 'object', properties: { files: { type: 'integer' }, names: { type: 'array', items: { type: 'string' } } }, required: ['files', 'names'] };

beforeAll(async () => {
  dir = await mkdtemp(join(tmpdir(), 'agentbus-ask-schema-'));
  await writeFile(join(dir, 'schema.json'), JSON.stringify(schema));
  await writeFile(join(dir, 'retry.json'), JSON.stringify({ responses: [{ text: 'Two files.' }, { text: '{"files": 2, "names": ["a", "b"]}' }] }));
  await writeFile(join(dir, 'never.json'), JSON.stringify({ responses: [{ text: 'Two files.' }, { text: '{"files": "two"}' }] }));
  await writeFile(join(dir, 'not-json.json'), '{ "type": "object", ');
  await writeFile(join(dir, 'bad-schema.json'), JSON.stringify({ type: 'object', properties: { files: { type: 'integr' } } }));
  await writeFile(join(dir, 'array.json'), JSON.stringify({ type: 'array' }));
});

afterAll(async () => {
  await rm(dir, { recursive: true, force: true });
});

const ask = (args: string[], script = 'retry.json') => runAgentbus(['ask', ...args], { cwd: dir, env: { ...offlineEnv(), AGENTBUS_SCRIPT: join(dir, script) }, timeoutMs: 90_000 });

describe('agentbus ask --schema', () => {
  it('is parsed as the file to read, and refused when empty', () => {
    expect(parseAsk(['--schema', 'out.json', 'hi'])).toMatchObject({ schemaFile: 'out.json', prompt: { text: 'hi' } });
    expect(parseAsk(['hi'])).not.toHaveProperty('schemaFile');
    expect(() => parseAsk(['--schema', ' ', 'hi'])).toThrow(UsageError);
  });

  it('prints only the typed output as JSON on stdout, after the runtime asked once more for it', async () => {
    const run = await ask(['--schema', 'schema.json', 'how many files?']);
    expect(run.code, run.stderr).toBe(0);
    expect(JSON.parse(run.stdout)).toEqual({ files: 2, names: ['a', 'b'] });
    expect(run.stdout).not.toContain('Two files.');
    expect(run.stderr).toContain("retry: attempt 2/2 in 0 ms: the final answer does not match the prompt's outputSchema: the answer is not JSON");
  }, 120_000);

  it('with --json, prints the events as NDJSON, turn.ended carrying the output', async () => {
    const run = await ask(['--json', '--schema', 'schema.json', 'how many files?']);
    expect(run.code, run.stderr).toBe(0);
    const events = run.stdout.trim().split('\n').map((line) => JSON.parse(line) as { type: string; data: Record<string, unknown> });
    expect(events.at(-1)).toMatchObject({ type: 'turn.ended', data: { reason: 'yielded', output: { files: 2, names: ['a', 'b'] } } });
    expect(events.find((event) => event.type === 'user.message')?.data.outputSchema).toEqual(schema);
  }, 120_000);

  it('exits 1 with output_invalid and the answer text on stderr when the answer never matches', async () => {
    const run = await ask(['--schema', 'schema.json', 'how many files?'], 'never.json');
    expect(run.code).toBe(1);
    expect(run.stdout).toBe('');
    expect(run.stderr).toMatch(/turn ended: .*failed.*output_invalid/);
    expect(run.stderr).toContain('answer text: {"files": "two"}');
  }, 120_000);

  it.each([
    ['a file that does not exist', 'missing.json', '--schema missing.json: cannot be read (ENOENT)'],
    ['a file that is not JSON', 'not-json.json', '--schema not-json.json is not JSON:'],
    ['a schema whose root is not an object', 'array.json', '--schema array.json must be a JSON Schema object whose "type" is "object"'],
    ['an invalid schema', 'bad-schema.json', '--schema bad-schema.json: outputSchema is not a valid JSON Schema: outputSchema/properties/files/type'],
  ])('refuses %s with exit 2 before starting anything', async (_what, file, message) => {
    const run = await ask(['--schema', file, 'hi']);
    expect(run.code).toBe(2);
    expect(run.stderr).toContain(message);
    expect(run.stderr).not.toContain('starting an embedded one');
  }, 60_000);
});
