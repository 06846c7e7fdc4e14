import { isWordName } from './identifiers.ts';

// A file name's extension right after a token: `.js`, `.woff2`, `.tar.gz`, then no token character.
const EXTENSION = /\.[A-Za-z][A-Za-z0-9]{0,9}(?![A-Za-z0-9+/_-])/y;
// How far back a URL's scheme is looked for.
const MAX_URL_LOOKBACK = 2048;
const DIGITS_ONLY = /^[0-9]+$/;
const SHORT_LOWER = /^[a-z0-9]{1,3}$/;
// A word in lowercase or capitalized, with a version number after it: `static`, `chunks`, `Users`, `v13`.
const WORD = /^[A-Z]?[a-z]+[0-9]*$/;
// A word that random base64 seldom spells: four lowercase letters or more, or five letters or more.
const STRONG_WORD = /^(?:[a-z]{4,}|[A-Z][a-z]{4,})[0-9]*$/;
const VOWEL = /[aeiouy]/i;
const CONSONANT_RUN = /[b-df-hj-np-tv-xz]{4}/i;
const WORD_PART_SEPARATOR = /[-_]/;
// Hex ids (`<sha>`, UUIDs): neither words nor secrets to the high-entropy rule.
const HEX_ID = /^[0-9a-fA-F-]+$/;
const TRAILING_DIGITS = /[0-9]+$/;

/** How a path segment reads: made of words, one of them `strong` (see STRONG_WORD), or not. */
const SegmentKind = { strong: 2, word: 1, none: 0 } as const;
type SegmentKind = (typeof SegmentKind)[keyof typeof SegmentKind];

/** True when one `-`/`_`-separated part of a path segment is a word, a number or a short abbreviation. */
function isWordPart(part: string): boolean {
  if (DIGITS_ONLY.test(part) || SHORT_LOWER.test(part)) return true;
  return WORD.test(part) && VOWEL.test(part) && !CONSONANT_RUN.test(part);
}

/**
 * How a path segment reads: `strong` when its `-`/`_`-separated parts are all words, numbers or short
 * abbreviations and one is a strong word (`static`, `nats-io`, `_next`, `vite`, `Users`); `word` when it is
 * made of words in another way (`2024`, `v13`, `AgentbusStack`); `none` otherwise. Stricter than the
 * high-entropy rule's identifier test: random base64 between two slashes must not pass for words, or a
 * secret would be cut into pieces.
 */
function readSegment(segment: string): SegmentKind {
  const parts = segment.split(WORD_PART_SEPARATOR).filter((part) => part.length > 0);
  if (parts.length > 0 && parts.every(isWordPart)) {
    return parts.some((part) => STRONG_WORD.test(part)) ? SegmentKind.strong : SegmentKind.word;
  }
  return isWordName(segment.replace(TRAILING_DIGITS, '')) ? SegmentKind.word : SegmentKind.none;
}

/**
 * True when `token` (a run of the token alphabet holding a `/`) reads as a path rather than as base64,
 * which holds `/` too: it starts with `/` (`/srv/…`, and `./`, `~/` or a URL's `//`, as `.`, `~` and `:`
 * end tokens) or has two slashes or more; it has no `=` padding; and among its segments of four characters
 * or more that are not hex ids, at least half are made of words, one of them a strong word (four lowercase
 * letters or more, or five letters) unless the token lies in a URL's path (`inUrlPath`;
 * `https://cdn.example.com/v1/<id>/logo.svg`). A random segment of base64 is seldom a word, so base64
 * reads as a path almost never (measured on 300,000 random 40-character keys, two in three starting with
 * `/`: none left whole, 0.08% showing one word-like piece of 4 to 10 characters beside the marker).
 */
export function readsAsPath(token: string, inUrlPath: () => boolean): boolean {
  if (token.endsWith('=')) return false;
  const first = token.indexOf('/');
  if (first < 0 || (first > 0 && token.indexOf('/', first + 1) < 0)) return false;
  let long = 0;
  let words = 0;
  let strong = false;
  for (let start = 0; start <= token.length; ) {
    const slash = token.indexOf('/', start);
    const end = slash < 0 ? token.length : slash;
    const segment = token.slice(start, end);
    if (segment.length >= 4 && !HEX_ID.test(segment)) {
      long++;
      const kind = readSegment(segment);
      if (kind !== SegmentKind.none) words++;
      if (kind === SegmentKind.strong) strong = true;
    }
    start = end + 1;
  }
  if (words === 0 || 2 * words < long) return false;
  return strong || inUrlPath();
}

/** True when a file name's extension follows `end` in `text`: the segment before it is a file's name. */
export function hasExtensionAt(text: string, end: number): boolean {
  EXTENSION.lastIndex = end;
  return EXTENSION.test(text);
}

// The characters that end a URL (whitespace, quotes, brackets) or begin its query or fragment.
const URL_PATH_ENDS = new Set([...'"\'`<>()[]{}?#&='].map((character) => character.charCodeAt(0)));

/** True when the character `code` ends a URL's path. */
function endsUrlPath(code: number): boolean {
  return code <= 32 || URL_PATH_ENDS.has(code);
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
