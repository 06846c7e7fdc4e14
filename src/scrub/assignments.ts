import { FindingPriority } from './findings.ts';
import type { Finding } from './findings.ts';
import { isWordName } from './identifiers.ts';

/** The longest quoted value looked at: AWS STS session tokens pass 1,000 characters, Azure AD tokens 4,000. */
export const MAX_QUOTED_VALUE_LENGTH = 16_384;

/**
 * `key = value` where the key ends in a secret's name (`API_KEY`, `apiKey`, `client_secret`, `password`,
 * `passphrase`, `GITHUB_TOKEN`, `SECRET_KEY_BASE`, `secretKey`, `x-api-key`, …; not `max_tokens` or
 * `secretName`), the value on the same line. A quoted value of 4 to {@link MAX_QUOTED_VALUE_LENGTH}
 * characters counts (a quote ends it, and a newline, so a failed attempt costs at most one line);
 * an unquoted one from 6 characters, unless it reads as code or as a count (see {@link isUnquotedSecret}).
 * Placeholders (`${…}`, `<…>`, `***`) and earlier markers are kept.
 */
const ASSIGNMENT = new RegExp(
  String.raw`(?:api[_-]?key|secret(?:[_-]?key(?:[_-]?base)?)?|passw(?:or)?d|passphrase|token|private[_-]?key|access[_-]?key)["']?[ \t]*(?::=|=>|[:=])[ \t]*` +
    String.raw`(?!["']?(?:\[REDACTED|\[redacted|\$\{|<|\*\*\*))` +
    String.raw`(?:"((?:[^"\\\n]|\\.){4,${MAX_QUOTED_VALUE_LENGTH}})"|'([^'\n]{4,${MAX_QUOTED_VALUE_LENGTH}})'|([^\s"'${'`'},;&(){}[\]<>]{6,}))`,
  'dgi',
);
// A number written bare: a count or a setting (`prompt_token: 123456`, `secret: -1234567`, `accessKey: 1.5e21`)…
const NUMBER = /^[+-]?(?:\d+\.?\d*|\.\d+)(?:[eE][+-]?\d+)?$/;
// …unless it is a whole number of 8 digits or more, as a PIN, a numeric password or a numeric token can be.
const SECRET_NUMBER = /^\d{8,}$/;
// `process.env.OPENAI_API_KEY`, `hashlib.sha256`, `request.form`, `user?.token`.
const DOTTED_PATH = /^[A-Za-z_$][\w$]*(?:\??\.[A-Za-z_$][\w$]*)+$/;
// Letters, `_` and `$` only: a digit or another symbol makes a value a secret, as it does a password.
const NAME = /^[A-Za-z_$]+$/;
// Type names written after a secret-named field (`token: string`, `password: Optional[str]`) and schema words.
const TYPE_WORDS = new Set([
  ...['string', 'number', 'boolean', 'bigint', 'symbol', 'object', 'unknown', 'undefined', 'nullable', 'required', 'optional'],
  ...['String', 'Number', 'Boolean', 'Object', 'Optional', 'Readonly', 'Partial', 'Record', 'Buffer', 'Secret'],
]);

/**
 * True when the unquoted `value` of a secret-named key, followed in the text by `next`, is a secret. Not
 * secrets: a number other than a whole one of 8 digits or more; code, that is a dotted path
 * (`password = hashlib.sha256(pw)`, `secret = base64.b64decode(raw)`), a name that is called
 * (`token = getToken()`), a type name (`token: string`), or a name of two or more words joined by `_` or
 * case (`token = next_token`, `token: CancellationToken`; see {@link isWordName}). A single run of letters
 * is a password: `password: zjbbdsqnwphs`, `PGPASSWORD=abcdefghijk`, `Password=UcPYTyKEHnZAmD;`. So is
 * any value with a digit or a symbol, except in a dotted path. What this keeps that it should not: a
 * passphrase written as a name (`password: CorrectHorseBattery`) and a dotted one (`secret=open.sesame`).
 */
function isUnquotedSecret(value: string, next: string): boolean {
  if (NUMBER.test(value)) return SECRET_NUMBER.test(value);
  if (next === '(' || DOTTED_PATH.test(value)) return false;
  if (!NAME.test(value)) return true;
  return !(TYPE_WORDS.has(value) || isWordName(value));
}

/** The values of secret-named assignments in `text`. */
export function findAssignments(text: string): Finding[] {
  const findings: Finding[] = [];
  for (const match of text.matchAll(ASSIGNMENT)) {
    const group = match[1] !== undefined ? 1 : match[2] !== undefined ? 2 : 3;
    const span = match.indices?.[group];
    if (!span) continue;
    if (group === 3 && !isUnquotedSecret(match[3] ?? '', text.charAt(span[1]))) continue;
    findings.push({ start: span[0], end: span[1], rule: 'secret-assignment', priority: FindingPriority.assignment });
  }
  return findings;
}
