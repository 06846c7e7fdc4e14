import type { Finding } from './findings.ts';

const QUOTE = 0x22;

// The characters that end a bare JSON scalar (a number, `true`, `false`, `null`): structure and whitespace.
const SCALAR_ENDS = new Set([...'",:[]{} \t\n\r'].map((character) => character.charCodeAt(0)));

/** True when the character `code` ends a bare JSON scalar. */
function endsScalar(code: number): boolean {
  return SCALAR_ENDS.has(code);
}

/** How many of the sorted `positions` lie before `index`. */
function countBefore(positions: readonly number[], index: number): number {
  let low = 0;
  let high = positions.length;
  while (low < high) {
    const middle = (low + high) >>> 1;
    if (positions[middle]! < index) low = middle + 1;
    else high = middle;
  }
  return low;
}

/**
 * Fits findings to one serialized JSON value, so that redacting them leaves it valid JSON. `blanked` is
 * the value with its escapes blanked to spaces, so that every `"` left in it is a string's delimiter.
 * A finding is cut where it crosses a delimiter, and the delimiters are kept; a part inside a string is
 * redacted as it is; a part outside strings (the value of `{"token": 12345678901}`) is widened to the
 * whole bare scalar it touches, whose marker is then written as a JSON string; a part that is only
 * structure (`,`, `:`, brackets, whitespace) is dropped.
 *
 * @example
 * fitToJsonLine('{"password":123456789}', [{ start: 12, end: 21, rule: 'secret-assignment', priority: 3 }])
 * // [{ start: 12, end: 21, rule: 'secret-assignment', priority: 3, quote: true }]
 */
export function fitToJsonLine(blanked: string, findings: readonly Finding[]): Finding[] {
  if (findings.length === 0) return [];
  const quotes: number[] = [];
  for (let index = blanked.indexOf('"'); index >= 0; index = blanked.indexOf('"', index + 1)) quotes.push(index);
  const fitted: Finding[] = [];
  for (const finding of findings) {
    let inside = countBefore(quotes, finding.start) % 2 === 1;
    let position = finding.start;
    while (position < finding.end) {
      if (blanked.charCodeAt(position) === QUOTE) {
        inside = !inside;
        position++;
        continue;
      }
      let stop = position;
      if (inside) {
        while (stop < finding.end && blanked.charCodeAt(stop) !== QUOTE) stop++;
        fitted.push({ ...finding, start: position, end: stop });
      } else {
        while (stop < finding.end && !endsScalar(blanked.charCodeAt(stop))) stop++;
        if (stop === position) {
          position++;
          continue;
        }
        let start = position;
        let end = stop;
        while (start > 0 && !endsScalar(blanked.charCodeAt(start - 1))) start--;
        while (end < blanked.length && !endsScalar(blanked.charCodeAt(end))) end++;
        fitted.push({ ...finding, start, end, quote: true });
      }
      position = stop;
    }
  }
  return fitted;
}
