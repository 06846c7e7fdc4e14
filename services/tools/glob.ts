import { compileGlobAutomaton } from './glob-automaton.ts';
import type { GlobNode } from './glob-automaton.ts';

/** A compiled glob: tests a `/`-separated path in time linear in the path's length (times the glob's). */
export interface GlobMatcher {
  readonly glob: string;
  /** Whether the whole of `path` matches the glob. */
  test(path: string): boolean;
}

/** Parses the body of `[…]` (what lies between the brackets) into a test of one UTF-16 code unit. */
function classOf(body: string): GlobNode {
  // `[!a]` negates as `[^a]` does; a backslash is itself. A `]` first in the class is one of its members (as in
  // POSIX globs). One character class and nothing else cannot backtrack, and the RegExp keeps the ranges and
  // negation as they were. A malformed class (`[z-a]`) throws a SyntaxError here, when the glob is compiled.
  let source = (body.startsWith('!') ? `^${body.slice(1)}` : body).replace(/\\/g, '\\\\');
  if (source.startsWith(']')) source = `\\${source}`;
  const expression = new RegExp(`^[${source}]$`);
  const seen = new Map<number, boolean>();
  return {
    kind: 'class',
    test(code) {
      let member = seen.get(code);
      if (member === undefined) {
        member = expression.test(String.fromCharCode(code));
        seen.set(code, member);
      }
      return member;
    },
  };
}

interface Frame {
  readonly branches: GlobNode[][];
  current: GlobNode[];
}

/** The glob as a tree: a sequence of nodes, `{a,b}` as alternatives of sequences. */
function parse(glob: string): GlobNode[] {
  const top: Frame = { branches: [], current: [] };
  const open: Frame[] = [];
  let frame = top;
  for (let index = 0; index < glob.length; index += 1) {
    const char = glob[index]!;
    if (char === '*') {
      if (glob[index + 1] === '*') {
        index += 1;
        if (glob[index + 1] === '/') {
          index += 1;
          frame.current.push({ kind: 'globstarSlash' });
        } else {
          frame.current.push({ kind: 'globstar' });
        }
      } else {
        frame.current.push({ kind: 'star' });
      }
    } else if (char === '?') {
      frame.current.push({ kind: 'notSlash' });
    } else if (char === '{') {
      open.push(frame);
      frame = { branches: [], current: [] };
    } else if (char === '}' && open.length > 0) {
      const alternatives: GlobNode = { kind: 'alternatives', branches: [...frame.branches, frame.current] };
      frame = open.pop()!;
      frame.current.push(alternatives);
    } else if (char === ',' && open.length > 0) {
      frame.branches.push(frame.current);
      frame.current = [];
    } else if (char === '[' && glob.indexOf(']', index + 2) >= 0) {
      // The class ends at the first `]` after its first character, so `[]a]` holds `]` and `a`.
      const end = glob.indexOf(']', index + 2);
      frame.current.push(classOf(glob.slice(index + 1, end)));
      index = end;
    } else {
      frame.current.push({ kind: 'text', code: glob.charCodeAt(index) });
    }
  }
  if (open.length > 0) throw new SyntaxError(`unclosed { in glob ${JSON.stringify(glob)}`);
  return top.current;
}

/**
 * Compiles a glob over `/`-separated paths: `*` any run of characters but `/`, `**` any run including `/`
 * (`**\/` also none), `?` one character but `/`, `{a,b}` either, `[abc]`/`[!abc]` a class, anything else itself.
 * Matching runs a Thompson automaton (a set of states advanced one character at a time), never backtracks:
 * `**\/**?**?…#` costs the same per character as `*.ts`. Throws a `SyntaxError` for an unclosed `{` or a
 * malformed class.
 *
 * @example
 * compileGlob('src/**\/*.ts').test('src/cli/main.ts'); // true
 */
export function compileGlob(glob: string): GlobMatcher {
  const automaton = compileGlobAutomaton(parse(glob));
  return { glob, test: (path) => automaton.matches(path) };
}
