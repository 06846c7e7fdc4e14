import fc from 'fast-check';
import { describe, expect, it } from 'vitest';
import { compileGlob } from '../../services/tools/glob.ts';
import { globToRegExp } from '../helpers/legacy-glob.ts';

// The glob matcher of search_text runs an automaton (services/tools/glob-automaton.ts) instead of the backtracking
// RegExp it used to compile (kept in test/helpers/legacy-glob.ts): the same answers, in linear time.

/** Pieces globs are made of: every construct, and the characters that have a meaning in one. */
const GLOB_PIECES = ['a', 'b', '.', '/', '-', '#', '\\', '😀', '*', '**', '**/', '?', '[ab]', '[!a]', '[a-c]', '[/]', '{', '}', ',', '{a,b}', '[', ']', '!', '^'] as const;
/** Characters paths are made of, line breaks and a character outside the BMP (two UTF-16 code units) included. */
const PATH_CHARACTERS = ['a', 'b', 'c', '.', '/', '/', '-', '#', ']', '\\', '\n', '😀'] as const;

const globs = fc.array(fc.constantFrom(...GLOB_PIECES), { minLength: 1, maxLength: 10 }).map((pieces) => pieces.join(''));
const paths = fc.array(fc.constantFrom(...PATH_CHARACTERS), { maxLength: 16 }).map((characters) => characters.join(''));

/** The verdict of a matcher, or that it refused the glob. */
function verdict(test: () => boolean): boolean | 'refused' {
  try {
    return test();
  } catch (error) {
    if (error instanceof SyntaxError) return 'refused';
    throw error;
  }
}

const HOSTILE_GLOB = `**/${'**?'.repeat(24)}#`;

describe('compileGlob', () => {
  it('agrees with the regular expression globs were compiled to, on random globs and paths', () => {
    fc.assert(
      fc.property(globs, fc.array(paths, { minLength: 1, maxLength: 8 }), (glob, candidates) => {
        // `[]…]` was an empty class (a glob that matched nothing); it is now a class holding `]`, as in POSIX.
        fc.pre(!glob.includes('[]'));
        for (const path of candidates) {
          const before = verdict(() => globToRegExp(glob).test(path));
          const after = verdict(() => compileGlob(glob).test(path));
          expect({ glob, path, after }).toEqual({ glob, path, after: before });
        }
      }),
      { numRuns: 3_000 },
    );
  });

  it.each([
    ['a glob without wildcards', 'src/a.ts', 'src/a.ts', true],
    ['** across directories', 'src/**/*.ts', 'src/x/y/a.ts', true],
    ['**/ matching no directory', 'src/**/*.ts', 'src/a.ts', true],
    ['* stopping at /', '*.ts', 'dir/a.ts', false],
    ['nested alternatives', '{a,{b,c}d}.md', 'cd.md', true],
    ['an empty alternative', 'a{,.bak}', 'a', true],
    ['a class first holding ]', '[]a]', ']', true],
    ['a negated class', '[!a]*.md', 'a.md', false],
    ['** not crossing a line break', 'a**b', 'a\nb', false],
    ['* crossing a line break', 'a*b', 'a\nb', true],
  ])('matches %s (%s against %s: %s)', (_what, glob, path, expected) => {
    expect(compileGlob(glob).test(path)).toBe(expected);
  });

  it.each([
    ['an unclosed brace', 'src/{a,b'],
    ['a range out of order', '[z-a].ts'],
  ])('refuses %s with a SyntaxError', (_what, glob) => {
    expect(() => compileGlob(glob)).toThrow(SyntaxError);
  });

  it('matches a glob that backtracked for minutes as a regular expression in linear time', () => {
    const hostile = compileGlob(HOSTILE_GLOB);
    // As a RegExp, a path of 32 characters took 16 s here, and each two more characters four times as long.
    const began = performance.now();
    for (const length of [32, 64, 256, 4096]) {
      expect(hostile.test(`${'a'.repeat(length)}/b`)).toBe(false);
      expect(hostile.test(`${'a'.repeat(length)}/b#`)).toBe(true);
    }
    expect(performance.now() - began).toBeLessThan(2_000);
  });

  it('agrees still when the sets of states it caches do not repeat, and it stops caching', () => {
    // `*a` and 14 `?`: which of the last 15 characters were `a` is the state, 2^15 sets of them, past its cache.
    const glob = `*a${'?'.repeat(14)}`;
    const matcher = compileGlob(glob);
    const reference = globToRegExp(glob);
    fc.assert(
      fc.property(fc.array(fc.constantFrom('a', 'b'), { minLength: 15, maxLength: 60 }), (characters) => {
        const path = characters.join('');
        expect(matcher.test(path)).toBe(reference.test(path));
      }),
      { numRuns: 20_000 },
    );
  });

  it('takes the deepest nesting of braces a 200-character glob can hold', () => {
    const glob = `${'{a,'.repeat(66)}b${'}'.repeat(66)}`;
    expect(compileGlob(glob).test('b')).toBe(true);
    expect(compileGlob(glob).test('c')).toBe(false);
  });
});
