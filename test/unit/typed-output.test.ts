import { describe, expect, it } from 'vitest';
import { createActor, toPromise } from 'xstate';
import { turnMachine } from '../../machines/turn.ts';
import type { TurnOutput } from '../../machines/turn.ts';
import { InvalidInputError } from '../../src/errors.ts';
import { compileOutputSchema, createOutputSchemaCompiler, outputInstruction, outputRetryMessage } from '../../src/output-schema.ts';
import { ErrorCode, TurnEndReason, promptSchema } from '../../src/protocol/index.ts';
import { endingOf, outputInvalidError, outputRetried, outputSchemaOf, resumedEnding } from '../../services/runtime/turn/turn-output.ts';
import { answer, createTurnFakes, read, streamOf } from '../helpers/turn-fakes.ts';
import type { LogEvent } from '../../src/protocol/index.ts';

const schema = { type: 'object', properties: { n: { type: 'integer', minimum: 0 }, tags: { type: 'array', items: { type: 'string' } } }, required: ['n'] };

describe('compileOutputSchema', () => {
  it('parses and accepts an answer that matches, fenced or not', async () => {
    const validator = await compileOutputSchema(schema);
    expect(validator.check('{"n": 2, "tags": ["a"]}')).toEqual({ ok: true, value: { n: 2, tags: ['a'] } });
    expect(validator.check('  ```json\n{"n": 0}\n```  ')).toEqual({ ok: true, value: { n: 0 } });
  });

  it('says why an answer does not match: not JSON, empty, or each validation error with its path', async () => {
    const validator = await compileOutputSchema(schema);
    expect(validator.check('n is 2')).toMatchObject({ ok: false, message: expect.stringMatching(/^the answer is not JSON \(/) });
    expect(validator.check('   ')).toEqual({ ok: false, message: 'the answer is empty, not JSON' });
    expect(validator.check('{"n": -1, "tags": [3]}')).toEqual({ ok: false, message: '/n must be >= 0; /tags/0 must be string' });
    expect(validator.check('{}')).toEqual({ ok: false, message: "(root) must have required property 'n'" });
  });

  it('names at most eight errors and counts the rest', async () => {
    const validator = await compileOutputSchema({ type: 'object', properties: { list: { type: 'array', items: { type: 'integer' } } } });
    const check = validator.check(JSON.stringify({ list: Array.from({ length: 12 }, (_, index) => `x${index}`) }));
    expect(check.ok).toBe(false);
    if (!check.ok) {
      expect(check.message.split('; /list').length).toBe(8);
      expect(check.message).toMatch(/; and 4 more$/);
    }
  });

  it('takes draft-07 by default and 2019-09 or 2020-12 by their $schema', async () => {
    const tuple = { type: 'object', properties: { pair: { type: 'array', prefixItems: [{ type: 'string' }, { type: 'integer' }], items: false } } };
    const modern = await compileOutputSchema({ $schema: 'https://json-schema.org/draft/2020-12/schema', ...tuple });
    expect(modern.check('{"pair": ["a", 1]}').ok).toBe(true);
    expect(modern.check('{"pair": ["a", 1, 2]}').ok).toBe(false);
    await expect(compileOutputSchema({ $schema: 'https://json-schema.org/draft/2019-09/schema', type: 'object' })).resolves.toBeDefined();
    await expect(compileOutputSchema({ $schema: 'http://json-schema.org/draft-07/schema#', type: 'object' })).resolves.toBeDefined();
  });

  it('refuses an invalid schema with InvalidInputError naming the problem', async () => {
    await expect(compileOutputSchema({ type: 'object', required: 'n' })).rejects.toThrow(new InvalidInputError('outputSchema is not a valid JSON Schema: outputSchema/required must be array'));
    await expect(compileOutputSchema({ type: 'object', properties: { a: { $ref: '#/definitions/none' } } })).rejects.toThrow(/can't resolve reference #\/definitions\/none/);
    await expect(compileOutputSchema({ $schema: 'https://json-schema.org/draft-04/schema#', type: 'object' })).rejects.toThrow(/unsupported \$schema/);
  });

  it.each(['^(a+)+$', '(a|ab)*', '(\\w+\\s?)*$', '((ab)*c)*', '(?:a|b)+', '(a)\\1'])('refuses the pattern %s, which can backtrack catastrophically on the event loop', async (pattern) => {
    await expect(compileOutputSchema({ type: 'object', properties: { s: { type: 'string', pattern } } })).rejects.toThrow(/outputSchema\/properties\/s\/pattern: the pattern .* (exponential time)/);
    await expect(compileOutputSchema({ type: 'object', patternProperties: { [pattern]: { type: 'string' } } })).rejects.toThrow(/outputSchema\/patternProperties/);
  });

  it.each(['^[A-Z]{2}-\\d{4}$', '^(foo|bar)$', '^(foo|bar)?x$', '(\\d{3}-){2}\\d', '^(?:[a-z]+)$', '[(a+)+]', '^\\(a+\\)+$'])('takes the linear pattern %s', async (pattern) => {
    const validator = await compileOutputSchema({ type: 'object', properties: { s: { type: 'string', pattern } } });
    expect(validator.check('{}').ok).toBe(true);
  });

  it('refuses a pattern over 1000 characters, but not one inside an enum value', async () => {
    await expect(compileOutputSchema({ type: 'object', properties: { s: { type: 'string', pattern: 'a'.repeat(1001) } } })).rejects.toThrow(/longer than 1000 characters/);
    await expect(compileOutputSchema({ type: 'object', properties: { s: { enum: [{ pattern: '(a+)+' }] } } })).resolves.toBeDefined();
  });

  it('writes the instruction and the retry message the model is given', () => {
    expect(outputInstruction(schema)).toContain(JSON.stringify(schema));
    expect(outputRetryMessage('/n must be integer')).toBe('Your final answer did not match the required JSON Schema: /n must be integer. Reply again with only the corrected JSON value, nothing else.');
  });
});

describe('createOutputSchemaCompiler', () => {
  it('compiles a schema once while it is among the most recently used, keyed by its JSON', async () => {
    const schemas = createOutputSchemaCompiler({ maxCached: 2 });
    const first = schemas.compile({ ...schema });
    expect(schemas.compile(JSON.parse(JSON.stringify(schema)) as Record<string, unknown>)).toBe(first);
    const other = schemas.compile({ type: 'object' });
    expect(schemas.compile(schema)).toBe(first);
    schemas.compile({ type: 'object', required: ['x'] });
    // Two newer schemas pushed out the older of them: `other`, not the one used again since.
    expect(schemas.compile({ type: 'object' })).not.toBe(other);
    expect(schemas.compile(schema)).not.toBe(first);
    expect((await first).check('{"n": 1}').ok).toBe(true);
  });

  it('does not keep a refusal, and compiles each schema apart: two tenants\' schemas with one $id do not meet', async () => {
    const schemas = createOutputSchemaCompiler();
    const bad = { type: 'object', required: 'n' };
    const refused = schemas.compile(bad);
    await expect(refused).rejects.toThrow(InvalidInputError);
    expect(schemas.compile(bad)).not.toBe(refused);
    await expect(schemas.compile(bad)).rejects.toThrow(InvalidInputError);
    const mine = await schemas.compile({ $id: 'https://example.com/out', type: 'object', required: ['a'] });
    const theirs = await schemas.compile({ $id: 'https://example.com/out', type: 'object', required: ['b'] });
    expect([mine.check('{"a": 1}').ok, theirs.check('{"a": 1}').ok]).toEqual([true, false]);
  });
});

describe('the prompt schema', () => {
  it('takes an object outputSchema and refuses another root or one over the cap', () => {
    expect(promptSchema.safeParse({ text: 'hi', outputSchema: schema }).success).toBe(true);
    expect(promptSchema.safeParse({ text: 'hi', outputSchema: { type: 'string' } }).error?.issues[0]?.message).toContain('"type" is "object"');
    expect(promptSchema.safeParse({ text: 'hi', outputSchema: [] }).success).toBe(false);
    expect(promptSchema.safeParse({ text: 'hi', outputSchema: { type: 'object', description: 'x'.repeat(33_000) } }).error?.issues[0]?.message).toContain('at most 32768 characters');
  });
});

const event = (type: string, data: Record<string, unknown>, turnId = 't1'): LogEvent => ({ v: 1, id: `${type}-${Math.random()}`, type, tenant: 'd', sessionId: 's', turnId, ts: 0, data }) as unknown as LogEvent;

describe('a turn\'s output schema from its log', () => {
  const transcript = (events: LogEvent[]) => ({ turnEvents: (turnId: string) => events.filter((logged) => logged.turnId === turnId) });

  it('is the one its prompt logged, not a steer\'s; the retry is seen once logged', () => {
    const log = [event('user.message', { text: 'q', outputSchema: schema }), event('assistant.message', { text: 'x', toolCalls: [] })];
    expect(outputSchemaOf(transcript(log), 't1')).toEqual(schema);
    expect(outputSchemaOf(transcript(log), 'other')).toBeUndefined();
    expect(outputRetried(transcript(log), 't1')).toBe(false);
    log.push(event('user.message', { text: 'again', steer: true, outputRetry: true }));
    expect(outputRetried(transcript(log), 't1')).toBe(true);
  });

  it('ends a resumed answered turn with its output, or output_invalid, and leaves an untyped one alone', async () => {
    expect(await resumedEnding(undefined, 'anything')).toBeUndefined();
    expect(await resumedEnding(schema, '{"n": 1}')).toEqual({ output: { n: 1 } });
    expect(await resumedEnding(schema, 'no')).toEqual({ error: expect.objectContaining({ code: ErrorCode.outputInvalid, retryable: false }) });
    expect(endingOf({ ok: false, message: 'm' })).toEqual({ error: outputInvalidError('m') });
  });
});

function runWith(fakes: ReturnType<typeof createTurnFakes>, input: { maxCost?: number }): Promise<TurnOutput> {
  const actor = createActor(turnMachine.provide({ actors: fakes.actors }), { input: { turnId: 'turn-1', model: 'scripted:default', maxSteps: 8, ...input } });
  const done = toPromise(actor);
  actor.start();
  return done;
}

function runTurn(stream: ReturnType<typeof streamOf>): Promise<TurnOutput> {
  const fakes = createTurnFakes({ stream });
  const actor = createActor(turnMachine.provide({ actors: fakes.actors }), { input: { turnId: 'turn-1', model: 'scripted:default', maxSteps: 8 } });
  const done = toPromise(actor);
  actor.start();
  return done;
}

describe('turn machine: typed output', () => {
  it('yields with the output of the final answer, not of an earlier step', async () => {
    const output = await runTurn(streamOf({ ...answer('calling', [read('c1')]), output: { stale: true } }, { ...answer('{"n": 3}'), output: { n: 3 } }));
    expect(output).toMatchObject({ reason: TurnEndReason.yielded, text: '{"n": 3}', output: { n: 3 }, steps: 2 });
  });

  it('keeps a falsy output (null, 0, false) as the output', async () => {
    expect((await runTurn(streamOf({ ...answer('null'), output: null }))).output).toBeNull();
  });

  it('fails with the stream\'s output error, keeping the text, with no output', async () => {
    const error = outputInvalidError('/n must be integer');
    const output = await runTurn(streamOf({ ...answer('{"n": "x"}'), outputError: error }));
    expect(output).toMatchObject({ reason: TurnEndReason.failed, text: '{"n": "x"}', error });
    expect('output' in output).toBe(false);
  });

  it('asks once more in the same step, with the retry request and why, when the turn has cost left', async () => {
    const retryRequest = { model: 'scripted:default', messages: [{ role: 'user' as const, content: 'fix it' }], tools: [] };
    const fakes = createTurnFakes({
      stream: streamOf({ ...answer('no'), outputError: outputInvalidError('not JSON'), outputRetry: { reason: 'not JSON', request: retryRequest } }, { ...answer('{"n": 1}'), output: { n: 1 } }),
    });
    const output = await runWith(fakes, { maxCost: 0.05 });
    expect(output).toMatchObject({ reason: TurnEndReason.yielded, output: { n: 1 }, cost: 0.02, steps: 1 });
    expect(fakes.calls.stream.map((call) => call.input.outputRetry)).toEqual([undefined, 'not JSON']);
    expect(fakes.calls.stream[1]!.input.request).toEqual(retryRequest);
  });

  it.each([
    ['at', 0.01],
    ['over', 0.005],
  ])('ends budget_exceeded instead of retrying a mismatched answer when the turn is %s its maxCost', async (_where, maxCost) => {
    const retryRequest = { model: 'scripted:default', messages: [], tools: [] };
    const fakes = createTurnFakes({ stream: streamOf({ ...answer('no'), outputError: outputInvalidError('not JSON'), outputRetry: { reason: 'not JSON', request: retryRequest } }, answer('{"n": 1}')) });
    const output = await runWith(fakes, { maxCost });
    expect(output).toMatchObject({ reason: TurnEndReason.budgetExceeded, text: 'no', cost: 0.01 });
    expect('output' in output).toBe(false);
    expect(fakes.calls.stream).toHaveLength(1);
  });

  it('runs tool calls as usual when a step with an output error still asked for tools', async () => {
    const output = await runTurn(streamOf({ ...answer('calling', [read('c1')]), outputError: outputInvalidError('x') }, answer('plain')));
    expect(output).toMatchObject({ reason: TurnEndReason.yielded, text: 'plain', steps: 2 });
  });
});
