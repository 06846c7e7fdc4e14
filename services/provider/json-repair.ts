/**
 * Finding and mending the JSON object in a model's reply: models without native tool calling wrap
 * it in prose or code fences and make small syntax slips. Pure functions, no I/O.
 */

const FENCE = /```[ \t]*(?:json|JSON|jsonc)?[ \t]*\r?\n?([\s\S]*?)```/g;

/**
 * The places a JSON object may hold in `text`, most likely first: the whole text, each code fence's
 * body, then each balanced `{…}` found by scanning (strings in either quote respected).
 */
export function jsonCandidates(text: string, limit = 8): string[] {
  const candidates: string[] = [];
  const add = (candidate: string) => {
    const trimmed = candidate.trim();
    if (trimmed.startsWith('{') && !candidates.includes(trimmed)) candidates.push(trimmed);
  };
  add(text);
  for (const match of text.matchAll(FENCE)) add(match[1] ?? '');
  for (let start = text.indexOf('{'); start >= 0 && candidates.length < limit; start = text.indexOf('{', start + 1)) {
    const end = balancedEnd(text, start);
    if (end !== undefined) add(text.slice(start, end + 1));
  }
  return candidates.slice(0, limit);
}

/** The index of the `}` that closes the `{` at `start`, or undefined when it never closes. */
function balancedEnd(text: string, start: number): number | undefined {
  let depth = 0;
  let quote: string | undefined;
  for (let index = start; index < text.length; index += 1) {
    const char = text[index];
    if (quote !== undefined) {
      if (char === '\\') index += 1;
      else if (char === quote) quote = undefined;
      continue;
    }
    if (char === '"' || char === "'") quote = char;
    else if (char === '{') depth += 1;
    else if (char === '}') {
      depth -= 1;
      if (depth === 0) return index;
    }
  }
  return undefined;
}

const LITERALS: Readonly<Record<string, string>> = { True: 'true', False: 'false', None: 'null', undefined: 'null' };

/**
 * Mends the small faults models make in JSON: single-quoted strings, unquoted keys, trailing commas,
 * typographic quotes and Python's `True`/`False`/`None`. Text that is already JSON comes back equal.
 */
export function repairJson(text: string): string {
  const source = text.replace(/[\u201C\u201D]/g, '"').replace(/[\u2018\u2019]/g, "'");
  let output = '';
  let index = 0;
  const lastSignificant = () => output.trimEnd().at(-1);
  while (index < source.length) {
    const char = source[index]!;
    if (char === '"' || char === "'") {
      const { value, end } = readString(source, index, char);
      output += JSON.stringify(value);
      index = end;
      continue;
    }
    if (char === ',') {
      const next = source.slice(index + 1).match(/^\s*(.)/)?.[1];
      if (next !== '}' && next !== ']') output += char;
      index += 1;
      continue;
    }
    const word = source.slice(index).match(/^[A-Za-z_$][\w$]*/)?.[0];
    if (word !== undefined) {
      const isKey = /^\s*:/.test(source.slice(index + word.length)) && (lastSignificant() === '{' || lastSignificant() === ',');
      if (isKey) output += JSON.stringify(word);
      else output += LITERALS[word] ?? word;
      index += word.length;
      continue;
    }
    output += char;
    index += 1;
  }
  return output;
}

/** Reads a string literal opened by `quote` at `start`; JSON escapes are kept, a lone `\'` becomes `'`. */
function readString(source: string, start: number, quote: string): { value: string; end: number } {
  let value = '';
  let index = start + 1;
  while (index < source.length) {
    const char = source[index]!;
    if (char === quote) return { value, end: index + 1 };
    if (char === '\\' && index + 1 < source.length) {
      const escaped = decodeEscape(source, index);
      value += escaped.value;
      index = escaped.end;
      continue;
    }
    value += char;
    index += 1;
  }
  return { value, end: index };
}

const SIMPLE_ESCAPES: Readonly<Record<string, string>> = { n: '\n', t: '\t', r: '\r', b: '\b', f: '\f', '/': '/', '\\': '\\', '"': '"', "'": "'" };

function decodeEscape(source: string, index: number): { value: string; end: number } {
  const next = source[index + 1]!;
  if (next === 'u') {
    const hex = source.slice(index + 2, index + 6);
    if (/^[0-9a-fA-F]{4}$/.test(hex)) return { value: String.fromCharCode(Number.parseInt(hex, 16)), end: index + 6 };
  }
  return { value: SIMPLE_ESCAPES[next] ?? next, end: index + 2 };
}

/**
 * Parses the first JSON object found in `text`, mending it when needed, or returns undefined.
 *
 * @example
 * findJsonObject("Sure! ```json\n{action: 'finish', final: 'hi',}\n```"); // { action: 'finish', final: 'hi' }
 */
export function findJsonObject(text: string): Record<string, unknown> | undefined {
  for (const candidate of jsonCandidates(text)) {
    for (const attempt of [candidate, repairJson(candidate)]) {
      const value = tryParse(attempt);
      if (typeof value === 'object' && value !== null && !Array.isArray(value)) return value as Record<string, unknown>;
    }
  }
  return undefined;
}

function tryParse(text: string): unknown {
  try {
    return JSON.parse(text) as unknown;
  } catch {
    // Not JSON: the caller tries the next candidate.
    return undefined;
  }
}
