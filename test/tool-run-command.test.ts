import { mkdir, mkdtemp, readFile, realpath, rm } from 'node:fs/promises';
import { readFileSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { RUN_COMMAND_MAX_OUTPUT, createRunCommandTool } from '../services/tools/run-command-tool.ts';
import type { CommandResult } from '../services/tools/run-command-tool.ts';
import { createWorkspace } from '../services/tools/workspace.ts';
import type { AnyToolDefinition } from '../src/tool-sdk/index.ts';
import { outputOf, runTool } from './helpers/run-tool.ts';

const NODE = process.execPath;
let root: string;
let tool: AnyToolDefinition;

beforeAll(async () => {
  root = await mkdtemp(join(tmpdir(), 'agentbus-run-'));
  await mkdir(join(root, 'sub'));
  tool = createRunCommandTool(createWorkspace(root));
});

afterAll(async () => {
  await rm(root, { recursive: true, force: true });
});

/** True while `pid` runs (a zombie waiting to be reaped counts as gone). */
function alive(pid: number): boolean {
  try {
    process.kill(pid, 0);
  } catch {
    return false;
  }
  try {
    return readFileSync(`/proc/${pid}/stat`, 'utf8').split(') ')[1]?.[0] !== 'Z';
  } catch {
    return false;
  }
}

async function until(check: () => boolean | Promise<boolean>, timeoutMs: number): Promise<boolean> {
  const end = Date.now() + timeoutMs;
  while (Date.now() < end) {
    if (await check()) return true;
    await new Promise((resolve) => setTimeout(resolve, 25));
  }
  return check();
}

async function run(args: Record<string, unknown>): Promise<CommandResult> {
  return outputOf<CommandResult>(await runTool(tool, args));
}

describe('run_command', () => {
  it('is privileged (needs approval) and not idempotent', () => {
    expect([tool.tier, tool.idempotent]).toEqual(['privileged', false]);
  });

  it('runs an argv array without a shell and returns exit code and output', async () => {
    const result = await run({ command: [NODE, '-e', 'console.log(process.argv[1]); console.error("warn"); process.exit(3)', '$HOME && echo *'] });
    expect(result).toMatchObject({ exitCode: 3, signal: null, timedOut: false, stdout: '$HOME && echo *\n', stderr: 'warn\n' });
  });

  it('runs in the workspace, or in a directory of it', async () => {
    expect((await run({ command: [NODE, '-e', 'process.stdout.write(process.cwd())'] })).stdout).toBe(await realpath(root));
    expect((await run({ command: [NODE, '-e', 'process.stdout.write(process.cwd())'], cwd: 'sub' })).stdout).toBe(await realpath(join(root, 'sub')));
  });

  it.each([
    ['a parent-relative cwd', '..'],
    ['a cwd that climbs out midway', 'sub/../../'],
    ['an absolute cwd outside', '/tmp'],
  ])('refuses %s with invalid_arguments', async (_what, cwd) => {
    expect(await runTool(tool, { command: [NODE, '-e', ''], cwd })).toMatchObject({ ok: false, error: { code: 'invalid_arguments', message: expect.stringContaining('outside the workspace') } });
  });

  it('does not hand the worker\'s credentials to the command', async () => {
    process.env['NATS_PASSWORD'] = 'not-for-commands';
    try {
      expect((await run({ command: [NODE, '-e', 'process.stdout.write(String(process.env.NATS_PASSWORD))'] })).stdout).toBe('undefined');
    } finally {
      delete process.env['NATS_PASSWORD'];
    }
  });

  it('cuts long output with a note of how much was left out', async () => {
    const result = await run({ command: [NODE, '-e', `process.stdout.write('x'.repeat(${RUN_COMMAND_MAX_OUTPUT + 12_345}))`] });
    expect(result.stdout.startsWith('x'.repeat(RUN_COMMAND_MAX_OUTPUT))).toBe(true);
    expect(result.stdout.slice(RUN_COMMAND_MAX_OUTPUT)).toBe('\n[truncated: 12345 more characters not shown]');
    expect(result.exitCode).toBe(0);
  });

  it('kills the whole process group at its timeout and says so', async () => {
    const started = Date.now();
    // sh starts a grandchild and waits for it: killing only sh would leave sleep running.
    const result = await run({ command: ['sh', '-c', 'sleep 30 & echo $!; wait'], timeoutMs: 300 });
    expect(Date.now() - started).toBeLessThan(5_000);
    expect(result).toMatchObject({ timedOut: true, exitCode: null });
    const grandchild = Number(result.stdout.trim());
    expect(grandchild).toBeGreaterThan(0);
    expect(await until(() => !alive(grandchild), 3_000)).toBe(true);
  });

  it('kills the command when the call is cancelled, and answers cancelled', async () => {
    const controller = new AbortController();
    const pidFile = join(root, 'pid.txt');
    const reply = runTool(tool, { command: ['sh', '-c', `echo $$ > ${pidFile}; exec sleep 30`] }, { signal: controller.signal });
    expect(await until(async () => (await readFile(pidFile, 'utf8').catch(() => '')).trim() !== '', 5_000)).toBe(true);
    const pid = Number((await readFile(pidFile, 'utf8')).trim());
    expect(alive(pid)).toBe(true);
    controller.abort(new Error('the user pressed stop'));
    expect(await reply).toMatchObject({ ok: false, error: { code: 'cancelled' } });
    expect(await until(() => !alive(pid), 3_000)).toBe(true);
  });

  it('answers not_found for a program that does not exist', async () => {
    expect(await runTool(tool, { command: ['agentbus-no-such-program'] })).toMatchObject({ ok: false, error: { code: 'not_found' } });
  });

  it('refuses an empty command', async () => {
    expect(await runTool(tool, { command: [] })).toMatchObject({ ok: false, error: { code: 'invalid_arguments' } });
  });
});
