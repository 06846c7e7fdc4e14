import { isWordName } from './identifiers.ts';

// A file name's extension right after a token: `.js`, `.woff2`, `.tar.gz`, then no token character.
const EXTENSION = /\.[A-Za-z][A-Za-z0-9]{0,9}(?![A-Za-z0-9+/_-])/y;
// How far back a URL's scheme is looked for.
const MAX_URL_LOOKBACK = 2048;
const DIGITS_ONLY = /^[0-9]+$/;
const SHORT_LOWER = /^[a-z0-9]{1,3}$/;
// A word in lowercase or capitalized, with a version number after it: `static`, `chunks`, `Users`, `v13`.
const WORD = /^[A-Z]?[a-z]+[0-9]*$/;
const VOWEL = /[aeiouy]/i;
const CONSONANT_RUN = /[b-df-hj-np-tv-xz]{4}/i;
const WORD_PART_SEPARATOR = /[-_]/;

/** True when one `-`/`_`-separated part of a path segment is a word, a number or a short abbreviation. */
function isWordPart(part: string): boolean {
  if (DIGITS_ONLY.test(part) || SHORT_LOWER.test(part)) return true;
  if (WORD.test(part)) return VOWEL.test(part) && !CONSONANT_RUN.test(part);
  return isWordName(part.replace(/[0-9]+$/, ''));
}

/**
 * True when a path segment is made of words (`static`, `nats-io`, `_next`, `2024`, `client-s3`,
 * `toolExecutionHelpers`). Stricter than {@link looksLikeIdentifier}: random base64 between two slashes
 * must not pass for a word, or a secret would be cut into pieces.
 */
function isWordSegment(segment: string): boolean {
  const parts = segment.split(WORD_PART_SEPARATOR).filter((part) => part.length > 0);
  return parts.length > 0 && parts.every(isWordPart);
}

/**
 * True when `token` (a run of the token alphabet holding a `/`) reads as a path rather than as base64,
 * which holds `/` too: it starts with `/` (`/srv/…`, and `./`, `~/` or a URL's `//`, as `.`, `~` and `:`
 * end tokens) or has two slashes or more; it has no `=` padding; and among its segments of four characters
 * or more, at least one is made of words and at least half are. Random base64 has short random segments,
 * so it reads as a path almost never, and a secret is never split into pieces too short to be seen.
 */
export function readsAsPath(token: string): boolean {
  if (token.endsWith('=')) return false;
  const first = token.indexOf('/');
  if (first < 0 || (first > 0 && token.indexOf('/', first + 1) < 0)) return false;
  let long = 0;
  let words = 0;
  for (let start = 0; start <= token.length; ) {
    const slash = token.indexOf('/', start);
    const end = slash < 0 ? token.length : slash;
    if (end - start >= 4) {
      long++;
      if (isWordSegment(token.slice(start, end))) words++;
    }
    start = end + 1;
  }
  return words > 0 && 2 * words >= long;
}

/** True when a file name's extension follows `end` in `text`: the segment before it is a file's name. */
export function hasExtensionAt(text: string, end: number): boolean {
  EXTENSION.lastIndex = end;
  return EXTENSION.test(text);
}

/** True for characters that end a URL, or begin its query or fragment. */
function endsUrlPath(code: number): boolean {
  return code <= 32 || code === 34 || code === 39 || code === 96 || code === 60 || code === 62 || code === 40 || code === 41 || code === 91 || code === 93 || code === 123 || code === 125 || code === 63 || code === 35 || code === 38 || code === 61;
}

/**
 * True when the token at `start` of `text` lies in the path of a URL with a scheme (`https://host/…`,
 * `gs://bucket/…`): looking back from it, `://` comes before whitespace, a quote, a bracket, or the `?`,
 * `#`, `&` or `=` of a query.
 */
export function isInUrlPath(text: string, start: number): boolean {
  const floor = Math.max(0, start - MAX_URL_LOOKBACK);
  for (let index = start; index > floor; index--) {
    if (text.startsWith('://', index - 1)) return true;
    if (endsUrlPath(text.charCodeAt(index - 1))) return false;
  }
  return false;
}
