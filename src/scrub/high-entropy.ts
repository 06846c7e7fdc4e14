import { FindingPriority } from './findings.ts';
import type { Finding } from './findings.ts';
import { looksLikeIdentifier } from './identifiers.ts';

/**
 * The high-entropy rule. A token is a maximal run of the base64 and base64url alphabets
 * (`A-Z a-z 0-9 + / _ -`, with `=` padding at its end only), so paths, URLs, `key=value` pairs and
 * dotted names split into their parts. A token is redacted as `[REDACTED:high-entropy]` when all hold:
 *
 * - its length is 24 to 512 characters;
 * - its classes are mixed: at least one lowercase letter, one uppercase letter and one digit (symbols do
 *   not count, so lowercase UUIDs, `snake_case_v2` names and uppercase ULIDs are never mixed);
 * - it is not pure hex once `-` and `_` are set aside (git SHAs, sha256 digests, UUIDs of any case);
 * - it is not a subresource-integrity digest (`sha256-…`, `sha384-…`, `sha512-…`, as in package-lock.json);
 * - it is not the id of a model provider's object (`call_…`, `toolu_…`, `msg_…`, `req_…`, `chatcmpl-…`, …):
 *   tool call ids are logged with every call and mean nothing without the provider's key;
 * - it does not read as an identifier or a path (see {@link looksLikeIdentifier});
 * - its Shannon entropy is at least 3.8 bits per character.
 *
 * Base64 of ordinary text is redacted on purpose: base64 credentials (Kubernetes Secret data, Basic
 * auth) look exactly like it.
 */
export const HIGH_ENTROPY_RULE = { name: 'high-entropy', minLength: 24, maxLength: 512, minBitsPerChar: 3.8 } as const;

const HEX = /^[0-9A-Fa-f_-]+$/;
const INTEGRITY_DIGEST = /^sha(?:256|384|512)-/;
const PROVIDER_OBJECT_ID = /^(?:call|toolu|srvtoolu|msg|req|resp|run|thread|asst|batch|file|chatcmpl)[_-][A-Za-z0-9]+$/;

/** Shannon entropy of `text` in bits per character, over its UTF-16 code units. */
export function shannonEntropy(text: string): number {
  if (text.length === 0) return 0;
  const counts = new Map<number, number>();
  for (let index = 0; index < text.length; index++) {
    const code = text.charCodeAt(index);
    counts.set(code, (counts.get(code) ?? 0) + 1);
  }
  let bits = 0;
  for (const count of counts.values()) {
    const share = count / text.length;
    bits -= share * Math.log2(share);
  }
  return bits;
}

/** True when `token` holds a lowercase letter, an uppercase letter and a digit. */
export function hasMixedClasses(token: string): boolean {
  let lower = false;
  let upper = false;
  let digit = false;
  for (let index = 0; index < token.length; index++) {
    const code = token.charCodeAt(index);
    if (code >= 97 && code <= 122) lower = true;
    else if (code >= 65 && code <= 90) upper = true;
    else if (code >= 48 && code <= 57) digit = true;
    if (lower && upper && digit) return true;
  }
  return false;
}

/** True when `token` (one run of the token alphabet) passes the high-entropy rule. */
export function isHighEntropySecret(token: string): boolean {
  const { minLength, maxLength, minBitsPerChar } = HIGH_ENTROPY_RULE;
  if (token.length < minLength || token.length > maxLength) return false;
  if (!hasMixedClasses(token) || HEX.test(token) || INTEGRITY_DIGEST.test(token) || PROVIDER_OBJECT_ID.test(token)) return false;
  return shannonEntropy(token) >= minBitsPerChar && !looksLikeIdentifier(token);
}

/** True for the character codes of `A-Z a-z 0-9 + / _ -`. */
function isTokenCode(code: number): boolean {
  return (code >= 97 && code <= 122) || (code >= 65 && code <= 90) || (code >= 47 && code <= 57) || code === 43 || code === 95 || code === 45;
}

/**
 * Every token of `text` that passes the high-entropy rule. A scan by character code rather than a regular
 * expression: a regex that matches every word allocates a match per word, three times the cost on prose.
 */
export function findHighEntropy(text: string): Finding[] {
  const findings: Finding[] = [];
  const { minLength, maxLength } = HIGH_ENTROPY_RULE;
  let index = 0;
  while (index < text.length) {
    if (!isTokenCode(text.charCodeAt(index))) {
      index++;
      continue;
    }
    const start = index;
    while (index < text.length && isTokenCode(text.charCodeAt(index))) index++;
    while (index < text.length && text.charCodeAt(index) === 61 /* = */) index++;
    const length = index - start;
    if (length >= minLength && length <= maxLength && isHighEntropySecret(text.slice(start, index))) {
      findings.push({ start, end: index, rule: HIGH_ENTROPY_RULE.name, priority: FindingPriority.highEntropy });
    }
  }
  return findings;
}
