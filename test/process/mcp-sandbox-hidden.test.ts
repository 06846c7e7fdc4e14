import { spawnSync } from 'node:child_process';
import { mkdir, mkdtemp, readFile, readdir, rm, writeFile } from 'node:fs/promises';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { mcpSandboxOf } from '../../cli/mcp.ts';
import { parseMcp } from '../../cli/mcp-options.ts';
import { mcpLaunch } from '../../src/mcp/index.ts';

// `agentbus mcp --sandbox` started in the folder of `agentbus up`: the server must not reach `.agentbus` (the bus's
// token, its JetStream store), as run_command's commands cannot.

let directory: string;
let other: string;

beforeAll(async () => {
  directory = await mkdtemp(join(tmpdir(), 'agentbus-mcp-hidden-'));
  other = await mkdtemp(join(tmpdir(), 'agentbus-mcp-hidden-other-'));
  await mkdir(join(directory, '.agentbus'), { mode: 0o700 });
  await writeFile(join(directory, '.agentbus', 'x'), 'stack-token\n');
  await mkdir(join(directory, 'private'));
  await writeFile(join(directory, 'private', 'secret'), 'private-secret\n');
  await writeFile(join(directory, 'visible.txt'), 'visible\n');
});

afterAll(async () => {
  await rm(directory, { recursive: true, force: true });
  await rm(other, { recursive: true, force: true });
});

/** Runs `script` as an `agentbus mcp --sandbox` server started in `directory` would run, and returns its stdout. */
async function runSandboxed(script: string, env: NodeJS.ProcessEnv = {}): Promise<{ stdout: string; status: number | null }> {
  const options = parseMcp(['--sandbox', '--', 'sh', '-c', script]);
  const context = { stdout: process.stdout, stderr: process.stderr, env, cwd: directory, stateDir: join(directory, '.agentbus'), signal: new AbortController().signal };
  const { sandbox } = await mcpSandboxOf(options, context);
  const launch = mcpLaunch({ kind: 'stdio', command: 'sh', args: ['-c', script], env: { PATH: '/usr/bin:/bin' }, cwd: directory, sandbox });
  const result = spawnSync(launch.command, launch.args, { env: launch.env, cwd: launch.cwd, encoding: 'utf8', timeout: 20_000 });
  expect(result.stderr, 'bwrap could not start').not.toMatch(/^bwrap:/m);
  return { stdout: result.stdout, status: result.status };
}

describe('agentbus mcp --sandbox and the state folder', () => {
  it('covers .agentbus of the folder: the server can neither read nor write there, but works in the rest', async () => {
    const { stdout } = await runSandboxed('cat .agentbus/x; ls -A .agentbus; echo planted > .agentbus/y || echo write-refused; echo ok > made.txt; cat visible.txt');
    expect(stdout).not.toContain('stack-token');
    expect(stdout).toContain('write-refused');
    expect(stdout).toContain('visible');
    expect(await readdir(join(directory, '.agentbus'))).toEqual(['x']);
    expect(await readFile(join(directory, 'made.txt'), 'utf8')).toBe('ok\n');
  });

  it('covers the paths of AGENTBUS_WORKSPACE_HIDE inside the folder too, and ignores those outside it', async () => {
    const { stdout } = await runSandboxed('cat private/secret; echo done', { AGENTBUS_WORKSPACE_HIDE: `${join(directory, 'private')}:${other}:relative` });
    expect(stdout).not.toContain('private-secret');
    expect(stdout).toContain('done');
  });
});
