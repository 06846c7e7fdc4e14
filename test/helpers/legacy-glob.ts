// The glob matcher search_text used before glob matching became linear (a backtracking RegExp), kept as the
// reference the new matcher is checked against (test/unit/glob-matcher.test.ts). Never use it on untrusted globs.

/**
 * A glob as a regular expression over `/`-separated paths: `*` any run of characters but `/`, `**` any run
 * including `/` (`**\/` also none), `?` one character but `/`, `{a,b}` either, `[abc]`/`[!abc]` a class.
 *
 * @example
 * globToRegExp('src/**\/*.ts').test('src/cli/main.ts'); // true
 */
export function globToRegExp(glob: string): RegExp {
  let source = '';
  let braces = 0;
  for (let index = 0; index < glob.length; index += 1) {
    const char = glob[index]!;
    if (char === '*') {
      if (glob[index + 1] === '*') {
        index += 1;
        if (glob[index + 1] === '/') {
          index += 1;
          source += '(?:.*/)?';
        } else {
          source += '.*';
        }
      } else {
        source += '[^/]*';
      }
    } else if (char === '?') {
      source += '[^/]';
    } else if (char === '{') {
      braces += 1;
      source += '(?:';
    } else if (char === '}' && braces > 0) {
      braces -= 1;
      source += ')';
    } else if (char === ',' && braces > 0) {
      source += '|';
    } else if (char === '[') {
      const end = glob.indexOf(']', index + 2);
      if (end < 0) {
        source += '\\[';
      } else {
        let body = glob.slice(index + 1, end);
        if (body.startsWith('!')) body = `^${body.slice(1)}`;
        source += `[${body.replace(/\\/g, '\\\\')}]`;
        index = end;
      }
    } else {
      source += char.replace(/[.+^${}()|[\]\\]/g, '\\$&');
    }
  }
  if (braces > 0) throw new SyntaxError(`unclosed { in glob ${JSON.stringify(glob)}`);
  return new RegExp(`^${source}$`);
}
