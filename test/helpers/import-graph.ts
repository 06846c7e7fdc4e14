import { readdirSync, readFileSync } from 'node:fs';
import { dirname, join, posix, relative, resolve, sep } from 'node:path';
import ts from 'typescript';

/** One import of a project file by another, both as paths relative to the repository root (`/` separated). */
export interface ImportEdge {
  readonly from: string;
  readonly to: string;
}

/** An import that breaks the "imports flow one way" rule, with the rule it breaks. */
export interface ImportViolation extends ImportEdge {
  readonly rule: string;
}

const SOURCE = /\.(?:ts|mts|js|mjs)$/;

function sourceFiles(root: string, folder: string): string[] {
  const found: string[] = [];
  const walk = (dir: string): void => {
    let entries;
    try {
      entries = readdirSync(dir, { withFileTypes: true });
    } catch {
      return;
    }
    for (const entry of entries) {
      if (entry.name === 'node_modules' || entry.name.startsWith('.')) continue;
      const path = join(dir, entry.name);
      if (entry.isDirectory()) walk(path);
      else if (SOURCE.test(entry.name) && !entry.name.endsWith('.d.ts')) found.push(path);
    }
  };
  walk(join(root, folder));
  return found;
}

/**
 * Reads the project-relative imports (static, `export … from`, `import type`, dynamic `import()`) of every source
 * file under `folders`, with TypeScript's own pre-processor, so imports shown in comments or strings do not count.
 * Package imports (`xstate`, `node:fs`) are left out.
 *
 * @example
 * const edges = readImportGraph(repoRoot, ['src', 'machines', 'services', 'cli']);
 */
export function readImportGraph(root: string, folders: readonly string[]): ImportEdge[] {
  const edges: ImportEdge[] = [];
  for (const folder of folders) {
    for (const file of sourceFiles(root, folder)) {
      const { importedFiles } = ts.preProcessFile(readFileSync(file, 'utf8'), true, true);
      const from = relative(root, file).split(sep).join(posix.sep);
      for (const { fileName } of importedFiles) {
        if (!fileName.startsWith('.')) continue;
        edges.push({ from, to: relative(root, resolve(dirname(file), fileName)).split(sep).join(posix.sep) });
      }
    }
  }
  return edges;
}

/**
 * The part of the tree a path belongs to, for the layering rules: `src/<folder>` (or `src/<file>` for a file at
 * src/'s top), `services/<name>`, or the top-level folder (`machines`, `cli`, `bin`, `test`, …).
 */
export function areaOf(path: string): string {
  const [top, second] = path.split('/');
  if ((top === 'src' || top === 'services') && second !== undefined) return `${top}/${second}`;
  return top ?? path;
}

const within = (path: string, folder: string): boolean => path === folder || path.startsWith(`${folder}/`);

/**
 * Checks edges against DESIGN.md's "Imports flow one way" rule: `cli → services, machines, src`;
 * `services/* → machines, src`, never another service; `machines → src/protocol` only; `src/*` never imports
 * `services/`, `machines/` or `cli/`; only the CLI's own entry points (`bin/`), tests and the bench import `cli/`;
 * and `src/bus` never imports `src/tool-sdk` (the SDK's workers serve on the bus, not the other way round).
 */
export function layeringViolations(edges: readonly ImportEdge[]): ImportViolation[] {
  const violations: ImportViolation[] = [];
  const flag = (edge: ImportEdge, rule: string) => violations.push({ ...edge, rule });
  for (const edge of edges) {
    const { from, to } = edge;
    if (within(to, 'cli') && !['cli', 'bin', 'test', 'bench'].some((folder) => within(from, folder))) {
      flag(edge, 'only bin/, tests and the bench import the CLI');
    }
    if (within(from, 'src')) {
      for (const folder of ['services', 'machines', 'cli']) {
        if (within(to, folder)) flag(edge, `src/ never imports ${folder}/`);
      }
      if (within(from, 'src/bus') && within(to, 'src/tool-sdk')) flag(edge, 'src/bus never imports src/tool-sdk');
    }
    if (within(from, 'machines') && !within(to, 'machines') && !within(to, 'src/protocol')) {
      flag(edge, 'machines/ imports only src/protocol');
    }
    if (within(from, 'services') && within(to, 'services') && areaOf(from) !== areaOf(to)) {
      flag(edge, 'a service never imports another service');
    }
  }
  return violations;
}

/**
 * The import cycles among `nodes` (strongly connected components of more than one node, or a node importing
 * itself), each listed in a stable order. `key` maps a path to its node (a file, or an area with {@link areaOf}).
 */
export function importCycles(edges: readonly ImportEdge[], key: (path: string) => string = (path) => path): string[][] {
  const next = new Map<string, Set<string>>();
  for (const { from, to } of edges) {
    const a = key(from);
    const b = key(to);
    if (a === b && from !== to) continue;
    if (!next.has(a)) next.set(a, new Set());
    next.get(a)!.add(b);
  }
  // Tarjan's algorithm.
  const index = new Map<string, number>();
  const low = new Map<string, number>();
  const stack: string[] = [];
  const onStack = new Set<string>();
  const cycles: string[][] = [];
  let counter = 0;
  const visit = (node: string): void => {
    index.set(node, counter);
    low.set(node, counter);
    counter += 1;
    stack.push(node);
    onStack.add(node);
    for (const target of next.get(node) ?? []) {
      if (!index.has(target)) {
        visit(target);
        low.set(node, Math.min(low.get(node)!, low.get(target)!));
      } else if (onStack.has(target)) {
        low.set(node, Math.min(low.get(node)!, index.get(target)!));
      }
    }
    if (low.get(node) !== index.get(node)) return;
    const component: string[] = [];
    let member: string;
    do {
      member = stack.pop()!;
      onStack.delete(member);
      component.push(member);
    } while (member !== node);
    if (component.length > 1 || next.get(node)?.has(node)) cycles.push(component.sort());
  };
  for (const node of [...next.keys()].sort()) if (!index.has(node)) visit(node);
  return cycles;
}
