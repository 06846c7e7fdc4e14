// Where the compiled CLI and services are (dist/, written by bin/build.js at `npm install`), and whether they are
// still those of the sources: plain JavaScript, since it runs before anything could compile TypeScript.
import { readFileSync, readdirSync, statSync } from 'node:fs';
import { join } from 'node:path';
import { fileURLToPath } from 'node:url';

/** The package's root folder. */
export const ROOT = fileURLToPath(new URL('..', import.meta.url));

/** What dist/ is compiled from: a change to any file in these (or one added or removed) makes it stale. */
export const SOURCES = ['src', 'machines', 'services', 'cli', 'examples/demo-script.json', 'package.json'];

/** The file that records which sources dist/ was compiled from. */
export const BUILD_INFO = 'build.json';

/**
 * The newest modification time and the number of files among {@link SOURCES}: a few milliseconds for a few
 * hundred files. A `git pull` or an edit gives the files it touches a new time; a removal changes the count.
 */
export function sourceFingerprint(root = ROOT) {
  let newestMtimeMs = 0;
  let files = 0;
  const visit = (path) => {
    const stat = statSync(path, { throwIfNoEntry: false });
    if (stat === undefined) return;
    if (stat.isDirectory()) {
      for (const name of readdirSync(path)) visit(join(path, name));
      return;
    }
    files += 1;
    if (stat.mtimeMs > newestMtimeMs) newestMtimeMs = stat.mtimeMs;
  };
  for (const source of SOURCES) visit(join(root, source));
  return { newestMtimeMs, files };
}

/**
 * The compiled CLI's entry (dist/cli/main.js) when dist/ was compiled from the sources as they are now, else
 * undefined: then the CLI runs its TypeScript through tsx, as in development.
 */
export function compiledCli(root = ROOT) {
  let info;
  try {
    info = JSON.parse(readFileSync(join(root, 'dist', BUILD_INFO), 'utf8'));
  } catch {
    return undefined;
  }
  const now = sourceFingerprint(root);
  if (info?.sources?.newestMtimeMs !== now.newestMtimeMs || info?.sources?.files !== now.files) return undefined;
  return join(root, 'dist', 'cli', 'main.js');
}
