import { FindingPriority } from './findings.ts';
import type { Finding } from './findings.ts';
import { looksLikeHyphenatedId, looksLikeIdentifier } from './identifiers.ts';
import { hasExtensionAt, isInUrlPath, readsAsPath } from './paths.ts';
import { findPublicBlocks, followsDigestLabel, isPublicToken } from './public-material.ts';

/**
 * The high-entropy rule. A token is a maximal run of the base64 and base64url alphabets
 * (`A-Z a-z 0-9 + / _ -`, with `=` padding at its end only), so `key=value` pairs, dotted names and host
 * names split into their parts. A token is redacted as `[REDACTED:high-entropy]` when all hold:
 *
 * - its length is 24 to 512 characters;
 * - its classes are mixed: at least one lowercase letter, one uppercase letter and one digit (symbols do
 *   not count, so lowercase UUIDs, `snake_case_v2` names and uppercase ULIDs are never mixed);
 * - it is not pure hex once `-` and `_` are set aside (git SHAs, sha256 digests, UUIDs of any case);
 * - it is not public by its form (see {@link isPublicToken}): an integrity digest (`sha1-…` to
 *   `sha512-…`), the id of a model provider's or Stripe's object (`call_…`, `toolu_…`, `pi_…`, `evt_…`),
 *   an SSH public key blob (`AAAAC3NzaC1lZDI1NTE5…`);
 * - it does not read as an identifier (see {@link looksLikeIdentifier}) nor as a hyphen-joined id of short
 *   parts such as a Kubernetes pod name or the runtime's node id (see {@link looksLikeHyphenatedId});
 * - its Shannon entropy is at least 3.8 bits per character.
 *
 * In a text, {@link findHighEntropy} also keeps the bodies of public PEM blocks (certificates, public
 * keys), go.sum's `h1:` hashes, and splits paths into their segments.
 *
 * Base64 of ordinary text is redacted on purpose: base64 credentials (Kubernetes Secret data, Basic
 * auth) look exactly like it.
 */
export const HIGH_ENTROPY_RULE = { name: 'high-entropy', minLength: 24, maxLength: 512, minBitsPerChar: 3.8 } as const;

const HEX = /^[0-9A-Fa-f_-]+$/;
// Longer runs are not read as paths (Linux's PATH_MAX is 4096): a megabyte of base64 is not split and scored.
const MAX_PATH_LENGTH = 4096;

/** Shannon entropy of `text` in bits per character, over its UTF-16 code units. */
export function shannonEntropy(text: string): number {
  if (text.length === 0) return 0;
  // Tokens are ASCII: counting in an array is several times faster than in a Map.
  const ascii = new Uint32Array(128);
  let others: Map<number, number> | undefined;
  for (let index = 0; index < text.length; index++) {
    const code = text.charCodeAt(index);
    if (code < 128) ascii[code]!++;
    else (others ??= new Map()).set(code, (others.get(code) ?? 0) + 1);
  }
  let bits = 0;
  const add = (count: number) => {
    const share = count / text.length;
    bits -= share * Math.log2(share);
  };
  for (const count of ascii) if (count > 0) add(count);
  if (others) for (const count of others.values()) add(count);
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

// A serial number after an id: `<nuid>_1`, as nats.js names ordered consumers.
const SERIAL_SUFFIX = /[_-][0-9]{1,4}$/;

/** True when `token` (one run of the token alphabet) passes the high-entropy rule. */
export function isHighEntropySecret(token: string): boolean {
  const { minLength, maxLength, minBitsPerChar } = HIGH_ENTROPY_RULE;
  if (token.length < minLength || token.length > maxLength) return false;
  // An id too short to count, with a serial number after it, is no longer a secret for that.
  if (token.length - (SERIAL_SUFFIX.exec(token)?.[0].length ?? 0) < minLength) return false;
  if (!hasMixedClasses(token) || HEX.test(token) || isPublicToken(token)) return false;
  if (shannonEntropy(token) < minBitsPerChar || looksLikeIdentifier(token)) return false;
  return !(token.includes('-') && looksLikeHyphenatedId(token));
}

/** True for the character codes of `A-Z a-z 0-9 + / _ -`. */
function isTokenCode(code: number): boolean {
  return (code >= 97 && code <= 122) || (code >= 65 && code <= 90) || (code >= 47 && code <= 57) || code === 43 || code === 95 || code === 45;
}

/**
 * The findings of a token that reads as a path (see {@link readsAsPath}): each `/`-separated segment is
 * scored alone, so one random segment costs that segment and not the whole path. A segment is kept
 * without scoring only when it is a file's name, followed by an extension
 * (`/_next/static/chunks/pages/_app-8fK3xY9qLmN2pQ7rT4vW.js`). Every other segment is scored, in a URL's path
 * too: capability URLs carry their token in the middle (`/share/<token>/download`, `/hooks/<token>/events`).
 */
function findInPath(text: string, start: number, end: number, findings: Finding[]): void {
  const { minLength } = HIGH_ENTROPY_RULE;
  let segmentStart = start;
  for (let index = start; index <= end; index++) {
    if (index < end && text.charCodeAt(index) !== 47 /* / */) continue;
    const segmentEnd = index;
    if (segmentEnd - segmentStart >= minLength) {
      const last = segmentEnd === end;
      const kept = last && hasExtensionAt(text, end);
      if (!kept && isHighEntropySecret(text.slice(segmentStart, segmentEnd))) {
        findings.push({ start: segmentStart, end: segmentEnd, rule: HIGH_ENTROPY_RULE.name, priority: FindingPriority.highEntropy });
      }
    }
    segmentStart = index + 1;
  }
}

/**
 * Every token of `text` that passes the high-entropy rule, outside public PEM blocks and `h1:` digests,
 * paths scored segment by segment. A scan by character code rather than a regular expression: a regex
 * that matches every word allocates a match per word, three times the cost on prose.
 */
export function findHighEntropy(text: string): Finding[] {
  const findings: Finding[] = [];
  const { minLength, maxLength } = HIGH_ENTROPY_RULE;
  const publicBlocks = findPublicBlocks(text);
  let block = 0;
  let index = 0;
  while (index < text.length) {
    if (!isTokenCode(text.charCodeAt(index))) {
      index++;
      continue;
    }
    const start = index;
    while (index < text.length && isTokenCode(text.charCodeAt(index))) index++;
    while (index < text.length && text.charCodeAt(index) === 61 /* = */) index++;
    if (index - start < minLength) continue;
    while (block < publicBlocks.length && publicBlocks[block]![1] <= start) block++;
    if (block < publicBlocks.length && publicBlocks[block]![0] <= start) continue;
    const token = text.slice(start, index);
    const path = index - start <= MAX_PATH_LENGTH && token.includes('/') && hasMixedClasses(token);
    if (path && readsAsPath(token, () => isInUrlPath(text, start))) {
      findInPath(text, start, index, findings);
    } else if (index - start <= maxLength && isHighEntropySecret(token) && !followsDigestLabel(text, start)) {
      findings.push({ start, end: index, rule: HIGH_ENTROPY_RULE.name, priority: FindingPriority.highEntropy });
    }
  }
  return findings;
}
