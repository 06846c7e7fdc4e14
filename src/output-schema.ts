import type { Ajv as AjvInstance, ErrorObject, Options, ValidateFunction } from 'ajv';
import { InvalidInputError } from './errors.ts';

/**
 * Typed final output: a prompt's `outputSchema` checked as a JSON Schema, and a final answer checked against it.
 *
 * The validator is Ajv, loaded on first use (`import()`), so a process that never sees a typed prompt (the CLI's
 * plain `ask`, a runtime with none) does not pay its loading. `$schema` picks the dialect: 2020-12 and 2019-09 by their
 * URIs, draft-07 otherwise. Formats (`"format": "email"`) are not asserted, as JSON Schema's own default says.
 */

/** A compiled `outputSchema`: checks a final answer's text. */
export interface OutputValidator {
  /** The answer parsed and checked, or why it does not match (not JSON, or each validation error with its path). */
  check(text: string): OutputCheck;
}

/** The outcome of {@link OutputValidator.check}. */
export type OutputCheck = { readonly ok: true; readonly value: unknown } | { readonly ok: false; readonly message: string };

/** At most this many validation errors are named in a message: the model needs the first few, not hundreds. */
const MAX_ERRORS_NAMED = 8;
/** The longest `pattern` (or `patternProperties` key) a schema may hold. */
const MAX_PATTERN_CHARS = 1000;

/** Compiles `outputSchema`s, keeping the validators of the most recently used ones. */
export interface OutputSchemaCompiler {
  /**
   * The validator of `schema` (a prompt's `outputSchema`). Rejects with `InvalidInputError` naming what is wrong when
   * it is not a valid JSON Schema: a keyword of the wrong shape, a `$ref` that does not resolve, an unknown `$schema`,
   * a `pattern` that could backtrack catastrophically.
   */
  compile(schema: Record<string, unknown>): Promise<OutputValidator>;
}

/** How many schemas' validators a compiler keeps, by default. */
const DEFAULT_CACHED = 64;

/**
 * A compiler that keeps one meta-schema checker per dialect (compiling the meta-schema is most of a cold compile's
 * cost) and the validators of the `maxCached` schemas used last, keyed by their JSON: a client that sends the same
 * schema with every prompt has it compiled once, on ingress, and the turn's checks reuse it. Each schema is compiled in
 * an Ajv instance of its own, so one tenant's `$id`s never meet another's. The runtime makes one and passes it on.
 *
 * @example
 * const schemas = createOutputSchemaCompiler();
 * const validator = await schemas.compile({ type: 'object', properties: { n: { type: 'integer' } }, required: ['n'] });
 * validator.check('{"n": 3}'); // { ok: true, value: { n: 3 } }
 * validator.check('{"n": "3"}'); // { ok: false, message: '/n must be integer' }
 */
export function createOutputSchemaCompiler(options: { readonly maxCached?: number } = {}): OutputSchemaCompiler {
  const maxCached = options.maxCached ?? DEFAULT_CACHED;
  const metaCheckers = new Map<string, Promise<AjvInstance>>();
  const cached = new Map<string, Promise<OutputValidator>>();
  return {
    compile(schema) {
      const key = JSON.stringify(schema);
      const hit = cached.get(key);
      if (hit) {
        // Most recently used last: the first key is the one to drop.
        cached.delete(key);
        cached.set(key, hit);
        return hit;
      }
      const compiling = compileFresh(schema, metaCheckers);
      cached.set(key, compiling);
      // A schema that does not compile is not kept: the next prompt with it gets the same refusal, computed again.
      compiling.catch(() => cached.delete(key));
      if (cached.size > maxCached) cached.delete(cached.keys().next().value!);
      return compiling;
    },
  };
}

/** Compiles `schema` once, keeping nothing (the CLI's check of a `--schema` file; tests). See {@link OutputSchemaCompiler.compile}. */
export function compileOutputSchema(schema: Record<string, unknown>): Promise<OutputValidator> {
  return createOutputSchemaCompiler({ maxCached: 0 }).compile(schema);
}

async function compileFresh(schema: Record<string, unknown>, metaCheckers: Map<string, Promise<AjvInstance>>): Promise<OutputValidator> {
  checkPatterns(schema, 'outputSchema');
  const dialect = dialectOf(schema.$schema);
  let checking = metaCheckers.get(dialect);
  if (!checking) metaCheckers.set(dialect, (checking = createAjv(dialect, {})));
  const checker = await checking;
  if (!checker.validateSchema(schema)) {
    throw new InvalidInputError(`outputSchema is not a valid JSON Schema: ${describeErrors(checker.errors, 'outputSchema')}`);
  }
  // Checked above: the instance that compiles needs no meta-schemas (and keeps nothing of other schemas).
  const ajv = await createAjv(dialect, { meta: false, validateSchema: false });
  let validate: ValidateFunction;
  try {
    validate = ajv.compile(schema);
  } catch (error) {
    throw new InvalidInputError(`outputSchema is not a valid JSON Schema: ${error instanceof Error ? error.message : String(error)}`, { cause: error });
  }
  return {
    check(text) {
      const parsed = parseAnswer(text);
      if (!parsed.ok) return parsed;
      if (validate(parsed.value)) return parsed;
      return { ok: false, message: describeErrors(validate.errors, '') };
    },
  };
}

/**
 * The instruction the model is given when its turn has an `outputSchema`: every provider gets it, with or without
 * native structured output, so a model on the JSON path (the scripted provider, a server without `response_format`)
 * knows what its final answer must be.
 */
export function outputInstruction(schema: Record<string, unknown>): string {
  return [
    'When you give your final answer (a reply without tool calls), reply with only a JSON value that matches this JSON Schema:',
    'no prose and no code fence around it. Call tools first if you need them; only the final answer must be the JSON.',
    JSON.stringify(schema),
  ].join('\n');
}

/** What the model is told after a final answer that did not match: the error, and the schema again. */
export function outputRetryMessage(reason: string): string {
  return `Your final answer did not match the required JSON Schema: ${reason}. Reply again with only the corrected JSON value, nothing else.`;
}

/** The answer's JSON: the whole text, or the inside of one code fence around all of it (models add them). */
function parseAnswer(text: string): OutputCheck {
  const trimmed = text.trim();
  const fenced = /^```[A-Za-z0-9_-]*\s*\n([\s\S]*?)\n?```$/.exec(trimmed);
  const json = fenced ? fenced[1]! : trimmed;
  if (json === '') return { ok: false, message: 'the answer is empty, not JSON' };
  try {
    return { ok: true, value: JSON.parse(json) as unknown };
  } catch (error) {
    return { ok: false, message: `the answer is not JSON (${error instanceof Error ? error.message : String(error)})` };
  }
}

/**
 * Refuses regular expressions that can backtrack catastrophically. A tenant writes the schema and steers the text it
 * is matched against, and Node's regex engine runs on the runtime's event loop: `^(a+)+$` against thirty `a`s and a
 * `!` would stall every session of the node. Refused: a quantified group that holds a quantifier or an alternation
 * (`(a+)+`, `(a|ab)*`, `(\w+\s?)*`), back-references, and patterns over {@link MAX_PATTERN_CHARS} characters. What
 * structured-output schemas use (`^[A-Z]{2}-\d{4}$`, `^(foo|bar)$`) passes.
 */
function checkPatterns(node: unknown, path: string): void {
  if (Array.isArray(node)) {
    node.forEach((item, index) => checkPatterns(item, `${path}/${index}`));
    return;
  }
  if (typeof node !== 'object' || node === null) return;
  for (const [key, value] of Object.entries(node)) {
    if (key === 'enum' || key === 'const' || key === 'default' || key === 'examples') continue;
    if (key === 'pattern' && typeof value === 'string') checkPattern(value, `${path}/pattern`);
    if (key === 'patternProperties' && typeof value === 'object' && value !== null) {
      for (const name of Object.keys(value)) checkPattern(name, `${path}/patternProperties`);
    }
    checkPatterns(value, `${path}/${key}`);
  }
}

function checkPattern(pattern: string, path: string): void {
  const refuse = (why: string) => {
    throw new InvalidInputError(`${path}: the pattern ${JSON.stringify(pattern.slice(0, 100))} ${why}`);
  };
  if (pattern.length > MAX_PATTERN_CHARS) refuse(`is longer than ${MAX_PATTERN_CHARS} characters`);
  if (/\\[1-9k]/.test(pattern)) refuse('uses a back-reference, which can take exponential time');
  // Per open group: whether it holds a quantifier or an alternation so far.
  const groups: Array<{ risky: boolean }> = [];
  let inClass = false;
  for (let at = 0; at < pattern.length; at++) {
    const char = pattern[at]!;
    if (char === '\\') {
      at += 1;
      continue;
    }
    if (inClass) {
      if (char === ']') inClass = false;
      continue;
    }
    if (char === '[') inClass = true;
    else if (char === '(') groups.push({ risky: false });
    else if (char === '|' && groups.length > 0) groups[groups.length - 1]!.risky = true;
    else if (char === ')') {
      const group = groups.pop();
      const next = pattern[at + 1];
      const quantified = next === '*' || next === '+' || next === '?' || next === '{';
      if (group?.risky && quantified && !/^\{\d+\}/.test(pattern.slice(at + 1)) && next !== '?') refuse('repeats a group that itself repeats or alternates, which can take exponential time');
      if ((group?.risky || quantified) && groups.length > 0) groups[groups.length - 1]!.risky = true;
    } else if ((char === '*' || char === '+' || char === '{') && groups.length > 0) groups[groups.length - 1]!.risky = true;
  }
}

function describeErrors(errors: readonly ErrorObject[] | null | undefined, root: string): string {
  if (!errors || errors.length === 0) return 'it does not match';
  const named = errors.slice(0, MAX_ERRORS_NAMED).map((error) => `${root}${error.instancePath || (root === '' ? '(root)' : '')} ${error.message ?? 'is invalid'}`.trim());
  const more = errors.length > MAX_ERRORS_NAMED ? `; and ${errors.length - MAX_ERRORS_NAMED} more` : '';
  return `${named.join('; ')}${more}`;
}

type Dialect = 'draft-07' | '2019-09' | '2020-12';

/** The dialect a `$schema` names: draft-07 when absent. */
function dialectOf(uri: unknown): Dialect {
  if (uri === undefined || (typeof uri === 'string' && /^https?:\/\/json-schema\.org\/draft-07\/schema#?$/.test(uri))) return 'draft-07';
  if (typeof uri === 'string' && /^https:\/\/json-schema\.org\/draft\/2020-12\/schema#?$/.test(uri)) return '2020-12';
  if (typeof uri === 'string' && /^https:\/\/json-schema\.org\/draft\/2019-09\/schema#?$/.test(uri)) return '2019-09';
  throw new InvalidInputError(`outputSchema: unsupported $schema ${JSON.stringify(uri)}; use draft-07, 2019-09 or 2020-12 (or leave it out)`);
}

async function createAjv(dialect: Dialect, extra: Options): Promise<AjvInstance> {
  // `strict: false`: unknown keywords (`examples`, vendor ones) are allowed, as JSON Schema allows them; `allErrors`
  // lets the model see every problem of its answer at once.
  const options: Options = { strict: false, allErrors: true, validateFormats: false, ...extra };
  if (dialect === '2020-12') {
    const { Ajv2020 } = await import('ajv/dist/2020.js');
    return new Ajv2020(options);
  }
  if (dialect === '2019-09') {
    const { Ajv2019 } = await import('ajv/dist/2019.js');
    return new Ajv2019(options);
  }
  const { Ajv } = await import('ajv');
  return new Ajv(options);
}
