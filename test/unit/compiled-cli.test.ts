import { mkdir, mkdtemp, rm, utimes, writeFile } from 'node:fs/promises';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { afterEach, beforeEach, describe, expect, it } from 'vitest';
import { BUILD_INFO, compiledCli, sourceFingerprint } from '../../bin/compiled.js';
import { serviceCommand } from '../../cli/service-command.ts';

describe('the compiled CLI (dist/)', () => {
  let root: string;
  beforeEach(async () => {
    root = await mkdtemp(join(tmpdir(), 'agentbus-dist-'));
    await mkdir(join(root, 'src'), { recursive: true });
    await mkdir(join(root, 'dist'), { recursive: true });
    await writeFile(join(root, 'package.json'), '{}');
    await writeFile(join(root, 'src', 'a.ts'), 'export {};');
  });
  afterEach(async () => {
    await rm(root, { recursive: true, force: true });
  });
  const built = () => writeFile(join(root, 'dist', BUILD_INFO), JSON.stringify({ sources: sourceFingerprint(root) }));

  it('is used only while it was compiled from the sources as they are', async () => {
    expect(compiledCli(root)).toBeUndefined();
    await built();
    expect(compiledCli(root)).toBe(join(root, 'dist', 'cli', 'main.js'));
    // An edit (a newer time), as after a pull.
    const later = new Date(Date.now() + 5_000);
    await utimes(join(root, 'src', 'a.ts'), later, later);
    expect(compiledCli(root)).toBeUndefined();
    await built();
    expect(compiledCli(root)).toBeDefined();
    // A file added with an old time (a checkout can keep times), or removed: the count tells.
    await writeFile(join(root, 'src', 'b.ts'), 'export {};');
    await utimes(join(root, 'src', 'b.ts'), new Date(0), new Date(0));
    expect(compiledCli(root)).toBeUndefined();
    await built();
    await rm(join(root, 'src', 'b.ts'));
    expect(compiledCli(root)).toBeUndefined();
  });

  it('is unreadable build info: the sources run', async () => {
    await writeFile(join(root, 'dist', BUILD_INFO), '{not json');
    expect(compiledCli(root)).toBeUndefined();
  });

  it('starts compiled services from the compiled CLI, and through tsx from the sources', () => {
    expect(serviceCommand('runtime', 'file:///opt/agentbus/dist/cli/main.js')).toEqual(['/opt/agentbus/dist/services/runtime/main.js']);
    const fromSource = serviceCommand('tools', 'file:///opt/agentbus/cli/service-stack.ts');
    expect(fromSource[0]).toBe('--import');
    expect(fromSource[1]).toMatch(/tsx/);
    expect(fromSource[2]).toBe('/opt/agentbus/services/tools/main.ts');
  });
});
