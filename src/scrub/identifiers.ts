/**
 * Tests that tell names written by people (identifiers, paths, type names, host names) from random
 * strings of the same characters. Each is measured against random draws, as its JSDoc says.
 */

// Camel-case humps, acronyms (`HTTPServer` → HTTP, Server) and digit runs.
const SEGMENT = /[A-Z]+(?=[A-Z][a-z])|[A-Z]?[a-z]+|[A-Z]+|[0-9]+/g;
const VOWEL = /[aeiouyAEIOUY]/;
const UPPER_ONLY = /^[A-Z]+$/;
const DIGITS_ONLY = /^[0-9]+$/;
// Four consonants in a row: rare in English words (`lengths` has one), common in random letters.
const CONSONANT_RUN = /[b-df-hj-np-tv-xzB-DF-HJ-NP-TV-XZ]{4}/;
const HUMP = /[A-Z]?[a-z]+|[A-Z]+/g;
const UPPER_SNAKE = /^[A-Z]+(?:_[A-Z]+)+$/;
const LOWER_WORD = /^[A-Z]?[a-z]+$/;
const LETTERS_AND_JOINS = /^[A-Za-z_$]+$/;

/**
 * True when `token` is made of words: split into camel-case humps, acronyms and digit runs, at least 70%
 * of its characters lie in parts of three or more characters that are digits, all capitals or hold a
 * vowel, and the parts average three characters or more. `createOAuth2ClientForTenant42`,
 * `src/services/runtime/toolExecution2Helpers` and `ListObjectsV2CommandOutput` pass; random base62
 * splits into short vowelless parts (measured: 0.6% of random 24-character tokens pass, 0.1% at 32
 * characters, none in 50,000 at 64).
 */
export function looksLikeIdentifier(token: string): boolean {
  const parts = token.match(SEGMENT);
  if (!parts) return false;
  let total = 0;
  let inWords = 0;
  for (const part of parts) {
    total += part.length;
    if (part.length >= 3 && (DIGITS_ONLY.test(part) || UPPER_ONLY.test(part) || VOWEL.test(part))) inWords += part.length;
  }
  return inWords >= 0.7 * total && total >= 3 * parts.length;
}

/** True when `word` (letters only) could be an English word or a common abbreviation. */
function isWordish(word: string): boolean {
  return word.length <= 3 || (VOWEL.test(word) && !CONSONANT_RUN.test(word));
}

/**
 * True when `value`, letters joined by `_` or `$`, is a name made of two or more words, as code writes
 * names: `next_token`, `sessionToken`, `CancellationToken`, `OPENAI_API_KEY`, `raw_pw_hash`. Each word is
 * a lowercase or capitalized run of letters holding a vowel and no four consonants in a row; among three
 * words or more, one may be a short abbreviation (`pw`, `ctx`); acronyms inside camel case (`HTTPServer`)
 * do not count. Stricter than {@link looksLikeIdentifier}, as it decides whether a password-shaped value
 * is kept: measured, 0.35% of random mixed-case 14-letter strings pass, 1.8% at 8 letters.
 */
export function isWordName(value: string): boolean {
  if (!LETTERS_AND_JOINS.test(value)) return false;
  if (UPPER_SNAKE.test(value)) return value.split('_').every(isWordish);
  const letters = value.replace(/[_$]+/g, '');
  const humps = value.match(HUMP);
  if (!humps || humps.length < 2 || humps.join('').length !== letters.length) return false;
  let short = 0;
  for (const hump of humps) {
    if (!LOWER_WORD.test(hump)) return false;
    if (hump.length < 3 || (hump.length === 3 && !VOWEL.test(hump))) short++;
    else if (!isWordish(hump)) return false;
  }
  return short === 0 || (short === 1 && humps.length >= 3);
}

// A part of a hyphen-joined id: no `+`, which only base64 has.
const ID_PART = /^[A-Za-z0-9_/]+$/;
const MAX_ID_PART_LENGTH = 12;
const MIXED_CASE = /[a-z][^-]*[A-Z]|[A-Z][^-]*[a-z]/;

/**
 * True when `token` is an id joined by hyphens from three or more short parts (each at most 12 characters,
 * or a word), of which at most one mixes capitals and lowercase letters: Kubernetes pod names
 * (`agentbus-runtime-7d9f8b6c5-x2k4m`, lowercase as host names are) and the runtime's node ids built on
 * them (`<host>-<pid>-<6 NUID characters>`). A random base64url secret has a `-` once in 64 characters and
 * capitals in most parts (measured: 2 in 100,000 random 24- to 64-character base64url tokens pass).
 */
export function looksLikeHyphenatedId(token: string): boolean {
  let parts = 0;
  let mixed = 0;
  let start = 0;
  for (let index = 0; index <= token.length; index++) {
    if (index < token.length && token.charCodeAt(index) !== 45 /* - */) continue;
    const part = token.slice(start, index);
    if (part.length === 0 || !ID_PART.test(part) || (part.length > MAX_ID_PART_LENGTH && !looksLikeIdentifier(part))) return false;
    if (MIXED_CASE.test(part) && ++mixed > 1) return false;
    parts++;
    start = index + 1;
  }
  return parts >= 3;
}
