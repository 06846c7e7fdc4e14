import { readdirSync, readFileSync } from 'node:fs';
import { join, posix, relative, sep } from 'node:path';
import { fileURLToPath } from 'node:url';
import ts from 'typescript';
import { describe, expect, it } from 'vitest';

// The test tiers (README, "Tests"): each test file sits in the folder of what it needs to run.

const root = fileURLToPath(new URL('../..', import.meta.url));
const TIERS = ['unit', 'bus', 'process'] as const;

/** What starts a nats-server (or connects to one): a bus test's needs. */
const NEEDS_BUS = ['helpers/nats-fixture.ts', 'helpers/nats-server.ts', 'helpers/shipped-nats.ts', '@nats-io/transport-node'];
/** What starts child processes (services, the CLI, an MCP server, a browser): a process test's needs. */
const NEEDS_PROCESSES = ['helpers/service-process.ts', 'helpers/agentbus-bin.ts', 'helpers/mcp-process.ts', 'helpers/browser.ts', 'cli/local-stack.ts', 'cli/service-stack.ts'];

function testFiles(dir: string): string[] {
  return readdirSync(dir, { withFileTypes: true }).flatMap((entry) => {
    if (entry.name === 'helpers' || entry.name === 'fixtures') return [];
    const path = join(dir, entry.name);
    if (entry.isDirectory()) return testFiles(path);
    return entry.name.endsWith('.test.ts') ? [relative(root, path).split(sep).join(posix.sep)] : [];
  });
}

function importsOf(file: string): { specifiers: string[]; text: string } {
  const text = readFileSync(join(root, file), 'utf8');
  return { specifiers: ts.preProcessFile(text, true, true).importedFiles.map(({ fileName }) => fileName), text };
}

const uses = (specifiers: readonly string[], needs: readonly string[]) => [...new Set(specifiers)].filter((specifier) => needs.some((need) => specifier === need || specifier.endsWith(`/${need}`)));

describe('the test folders', () => {
  const files = testFiles(join(root, 'test'));

  it('hold every test file in test/unit, test/bus or test/process', () => {
    expect(files.length).toBeGreaterThan(100);
    expect(files.filter((file) => !TIERS.some((tier) => file.startsWith(`test/${tier}/`)))).toEqual([]);
  });

  it('keep unit tests off the bus and out of child processes', () => {
    const wrong = files
      .filter((file) => file.startsWith('test/unit/'))
      .flatMap((file) => {
        const { specifiers, text } = importsOf(file);
        const found = [...uses(specifiers, [...NEEDS_BUS, ...NEEDS_PROCESSES, 'node:child_process']), ...(/\bstartStack\(/.test(text) ? ['startStack'] : [])];
        return found.map((need) => `${file}: ${need}`);
      });
    expect(wrong).toEqual([]);
  });

  it('keep bus tests in one process (services and the CLI in process, not spawned)', () => {
    const wrong = files
      .filter((file) => file.startsWith('test/bus/'))
      .flatMap((file) => uses(importsOf(file).specifiers, NEEDS_PROCESSES).map((need) => `${file}: ${need}`));
    expect(wrong).toEqual([]);
  });
});
