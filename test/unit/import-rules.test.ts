import { mkdirSync, mkdtempSync, rmSync, writeFileSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { dirname, join } from 'node:path';
import { fileURLToPath } from 'node:url';
import { afterAll, describe, expect, it } from 'vitest';
import { areaOf, importCycles, layeringViolations, readImportGraph } from '../helpers/import-graph.ts';
import type { ImportEdge } from '../helpers/import-graph.ts';

// DESIGN.md, "Imports flow one way", checked by reading every import line of the shipped code.

const root = fileURLToPath(new URL('../..', import.meta.url));
const SHIPPED = ['src', 'machines', 'services', 'cli', 'bin', 'examples'] as const;

describe('the import reader', () => {
  const dir = mkdtempSync(join(tmpdir(), 'agentbus-imports-'));
  afterAll(() => rmSync(dir, { recursive: true, force: true }));
  const write = (path: string, text: string) => {
    mkdirSync(dirname(join(dir, path)), { recursive: true });
    writeFileSync(join(dir, path), text);
  };

  it('reads static, type, re-export, side-effect and dynamic imports, and skips comments, strings and packages', () => {
    write(
      'src/bus/a.ts',
      [
        "import { x } from '../protocol/index.ts';",
        "import type {\n  Y,\n} from '../tool-sdk/y.ts';",
        "export { z } from './z.ts';",
        "import '../side.ts';",
        "const later = await import('../../cli/main.ts');",
        "import { connect } from '@nats-io/transport-node';",
        "// import { no } from '../../services/runtime/index.ts';",
        "/** @example import { no } from '../../machines/turn.ts'; */",
        "const text = \"import { no } from '../../services/memory/index.ts'\";",
      ].join('\n'),
    );
    const targets = readImportGraph(dir, ['src']).map(({ to }) => to);
    expect(targets.sort()).toEqual(['cli/main.ts', 'src/bus/z.ts', 'src/protocol/index.ts', 'src/side.ts', 'src/tool-sdk/y.ts']);
  });
});

describe('the layering rules', () => {
  const edge = (from: string, to: string): ImportEdge => ({ from, to });

  it('flags every arrow that flows the wrong way', () => {
    const wrong = [
      edge('src/bus/a.ts', 'services/runtime/b.ts'),
      edge('src/client/a.ts', 'cli/main.ts'),
      edge('src/viz/a.ts', 'machines/turn.ts'),
      edge('src/bus/tool-client.ts', 'src/tool-sdk/tool-metadata.ts'),
      edge('machines/turn.ts', 'src/bus/request.ts'),
      edge('machines/turn.ts', 'services/runtime/x.ts'),
      edge('services/runtime/a.ts', 'services/memory/b.ts'),
      edge('services/tools/a.ts', 'cli/connect.ts'),
      edge('examples/tools.ts', 'cli/tool-module.ts'),
    ];
    const found = layeringViolations(wrong);
    for (const arrow of wrong) expect(found.some(({ from, to }) => from === arrow.from && to === arrow.to), `${arrow.from} → ${arrow.to}`).toBe(true);
  });

  it('lets the arrows DESIGN.md draws through', () => {
    const right = [
      edge('cli/main.ts', 'services/runtime/index.ts'),
      edge('cli/viz.ts', 'machines/index.ts'),
      edge('cli/ask.ts', 'src/client/index.ts'),
      edge('bin/agentbus.js', 'cli/main.ts'),
      edge('services/runtime/a.ts', 'machines/turn.ts'),
      edge('services/runtime/a.ts', 'services/runtime/b.ts'),
      edge('services/tools/a.ts', 'src/tool-sdk/index.ts'),
      edge('machines/turn.ts', 'machines/tool-batch.ts'),
      edge('machines/turn.ts', 'src/protocol/index.ts'),
      edge('src/tool-sdk/tool-worker.ts', 'src/bus/request.ts'),
      edge('src/bus/tool-client.ts', 'src/protocol/tool-metadata.ts'),
    ];
    expect(layeringViolations(right)).toEqual([]);
  });

  it('finds cycles of files and of areas', () => {
    const edges = [edge('src/bus/a.ts', 'src/tool-sdk/b.ts'), edge('src/tool-sdk/b.ts', 'src/tool-sdk/c.ts'), edge('src/tool-sdk/c.ts', 'src/bus/d.ts')];
    expect(importCycles(edges)).toEqual([]);
    expect(importCycles(edges, areaOf)).toEqual([['src/bus', 'src/tool-sdk']]);
    expect(importCycles([...edges, edge('src/bus/d.ts', 'src/bus/a.ts')])).toEqual([['src/bus/a.ts', 'src/bus/d.ts', 'src/tool-sdk/b.ts', 'src/tool-sdk/c.ts']]);
  });
});

describe('the shipped code', () => {
  const edges = readImportGraph(root, SHIPPED);

  it('is read whole (the check is not vacuous)', () => {
    expect(edges.length).toBeGreaterThan(500);
    expect(edges).toContainEqual({ from: 'bin/agentbus.js', to: 'cli/main.ts' });
    expect(edges.some(({ from, to }) => from.startsWith('services/runtime/') && to.startsWith('machines/'))).toBe(true);
    expect(edges.some(({ from, to }) => from.startsWith('src/tool-sdk/') && to.startsWith('src/bus/'))).toBe(true);
  });

  it('imports only the way DESIGN.md says: src never imports services, machines or the CLI; machines only src/protocol; no service another', () => {
    expect(layeringViolations(edges)).toEqual([]);
  });

  it('has no import cycle between the folders of src/ (src/bus and src/tool-sdk do not import each other)', () => {
    expect(importCycles(edges.filter(({ from, to }) => from.startsWith('src/') && to.startsWith('src/')), areaOf)).toEqual([]);
  });

  it('has no import cycle between files in src/, machines/, cli/ or services/', () => {
    const inside = (path: string) => ['src/', 'machines/', 'cli/', 'services/'].some((folder) => path.startsWith(folder));
    expect(importCycles(edges.filter(({ from, to }) => inside(from) && inside(to)))).toEqual([]);
  });
});
