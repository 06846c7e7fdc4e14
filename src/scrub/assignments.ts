import { FindingPriority } from './findings.ts';
import type { Finding } from './findings.ts';

/**
 * `key = value` where the key ends in a secret's name (`API_KEY`, `apiKey`, `client_secret`, `password`,
 * `GITHUB_TOKEN`, `x-api-key`, …; not `max_tokens` or `secretName`): the value is redacted. A quoted value
 * of 4 characters or more counts; an unquoted one counts from 6 characters when it holds a digit or a
 * symbol other than `.`, `_` and `$`, so code such as `apiKey = process.env.OPENAI_API_KEY` is kept.
 * Placeholders (`${…}`, `<…>`, `***`) and earlier markers are kept too.
 */
const ASSIGNMENT =
  /(?:api[_-]?key|secret|passw(?:or)?d|token|private[_-]?key|access[_-]?key)["']?\s*(?::=|=>|[:=])\s*(?!["']?(?:\[REDACTED|\[redacted|\$\{|<|\*\*\*))(?:"((?:[^"\\\n]|\\.){4,1000})"|'([^'\n]{4,1000})'|([^\s"'`,;&(){}[\]<>]{6,}))/dgi;
const CODE_REFERENCE = /^[A-Za-z_.$]+$/;
// A number written bare: a count or a setting (`prompt_token: 123456`, `secret: -1234567`, `accessKey: 1.5e21`).
const NUMBER = /^[+-]?(?:\d+\.?\d*|\.\d+)(?:[eE][+-]?\d+)?$/;
// …unless it is a whole number of 8 digits or more, as a PIN, a numeric password or a numeric token can be.
const SECRET_NUMBER = /^\d{8,}$/;

/** True when the unquoted `value` of a secret-named key is a secret: not code, not a count. */
function isUnquotedSecret(value: string): boolean {
  if (NUMBER.test(value)) return SECRET_NUMBER.test(value);
  return !CODE_REFERENCE.test(value);
}

/**
 * The values of secret-named assignments in `text`. An unquoted number counts only when it is a whole
 * number of 8 digits or more: `prompt_token: 123456` is a token count, `password=12345678` may be a PIN.
 */
export function findAssignments(text: string): Finding[] {
  const findings: Finding[] = [];
  for (const match of text.matchAll(ASSIGNMENT)) {
    const group = match[1] !== undefined ? 1 : match[2] !== undefined ? 2 : 3;
    const span = match.indices?.[group];
    if (!span) continue;
    if (group === 3 && !isUnquotedSecret(match[3] ?? '')) continue;
    findings.push({ start: span[0], end: span[1], rule: 'secret-assignment', priority: FindingPriority.assignment });
  }
  return findings;
}
