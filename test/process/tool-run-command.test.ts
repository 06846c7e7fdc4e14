import { mkdir, mkdtemp, realpath, rm, stat } from 'node:fs/promises';
import { readFileSync, readdirSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { createServer } from 'node:net';
import type { AddressInfo, Server } from 'node:net';
import { pino } from 'pino';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { RUN_COMMAND_MAX_OUTPUT, createRunCommandTool } from '../../services/tools/run-command-tool.ts';
import type { CommandResult } from '../../services/tools/run-command-tool.ts';
import { createTenantWorkspaces } from '../../services/tools/tenant-workspaces.ts';
import { createWorkspace } from '../../services/tools/workspace.ts';
import type { ToolCallReply } from '../../src/protocol/index.ts';
import { executeToolCall } from '../../src/tool-sdk/index.ts';
import type { AnyToolDefinition } from '../../src/tool-sdk/index.ts';
import { outputOf, runTool, toolCallRequest } from '../helpers/run-tool.ts';

const silent = pino({ level: 'silent' });

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

let sleeps = 0;
/** A sleep duration no other process here has: a marker to find the sandbox's processes from outside. */
function uniqueSleep(): string {
  sleeps += 1;
  return `${30 + sleeps}.${process.pid}`;
}

/** Host pids of live processes whose command line is `sleep <marker>`. */
function hostProcessesRunning(marker: string): number[] {
  return readdirSync('/proc')
    .filter((name) => /^\d+$/.test(name))
    .filter((name) => {
      try {
        return readFileSync(`/proc/${name}/cmdline`, 'utf8') === `sleep\0${marker}\0` && alive(Number(name));
      } catch {
        return false;
      }
    })
    .map(Number);
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

  it('kills the whole sandbox at its timeout and says so: no process of it survives', async () => {
    const marker = uniqueSleep();
    const started = Date.now();
    // sh starts a grandchild and waits for it: killing only sh would leave sleep running.
    const result = await run({ command: ['sh', '-c', `sleep ${marker} & wait`], timeoutMs: 1_500 });
    expect(Date.now() - started).toBeLessThan(8_000);
    expect(result).toMatchObject({ timedOut: true, exitCode: null });
    expect(await until(() => hostProcessesRunning(marker).length === 0, 3_000)).toBe(true);
  });

  it('kills the sandbox when the call is cancelled, and answers cancelled', async () => {
    const controller = new AbortController();
    const marker = uniqueSleep();
    const reply = runTool(tool, { command: ['sh', '-c', `sleep ${marker} & sleep ${marker}`] }, { signal: controller.signal });
    expect(await until(() => hostProcessesRunning(marker).length === 2, 5_000)).toBe(true);
    controller.abort(new Error('the user pressed stop'));
    expect(await reply).toMatchObject({ ok: false, error: { code: 'cancelled' } });
    expect(await until(() => hostProcessesRunning(marker).length === 0, 3_000)).toBe(true);
  });

  it('answers not_found for a program that does not exist', async () => {
    expect(await runTool(tool, { command: ['agentbus-no-such-program'] })).toMatchObject({ ok: false, error: { code: 'not_found' } });
  });

  it('refuses an empty command', async () => {
    expect(await runTool(tool, { command: [] })).toMatchObject({ ok: false, error: { code: 'invalid_arguments' } });
  });
});

/** Runs one call of `target` for `tenant`, as a worker would. */
function runAs(target: AnyToolDefinition, tenant: string, args: unknown): Promise<ToolCallReply> {
  return executeToolCall({ tool: target, request: { ...toolCallRequest(target.name, args), tenant }, logger: () => silent, signal: new AbortController().signal, now: Date.now });
}

describe("run_command's sandbox (bubblewrap)", () => {
  const MARKER = `agentbus-marker-${process.pid}-${Date.now()}`;
  let listener: Server;
  let port: number;
  let tenantsRoot: string;
  let tenantTool: AnyToolDefinition;

  beforeAll(async () => {
    listener = createServer((socket) => socket.end());
    await new Promise<void>((resolve) => listener.listen(0, '127.0.0.1', resolve));
    port = (listener.address() as AddressInfo).port;
    tenantsRoot = await realpath(await mkdtemp(join(tmpdir(), 'agentbus-tenants-')));
    tenantTool = createRunCommandTool(createTenantWorkspaces(tenantsRoot));
    process.env['AGENTBUS_TEST_SECRET'] = MARKER;
    process.env['NATS_PASSWORD'] = MARKER;
  });

  afterAll(async () => {
    delete process.env['AGENTBUS_TEST_SECRET'];
    delete process.env['NATS_PASSWORD'];
    await new Promise((resolve) => listener.close(resolve));
    await rm(tenantsRoot, { recursive: true, force: true });
  });

  it("shows the command none of the worker's environment: not its own, not its parent's, not /proc/1's", async () => {
    const result = await run({ command: ['sh', '-c', 'env; echo ---; cat /proc/$PPID/environ; echo ---; cat /proc/1/environ; echo ---; ls /proc'] });
    expect(result.exitCode).toBe(0);
    expect(result.stdout).not.toContain(MARKER);
    const [env] = result.stdout.split('---\n');
    const names = env!.trim().split('\n').map((line) => line.slice(0, line.indexOf('=')));
    // sh adds PWD (and may add SHLVL, _); nothing else is there.
    expect(names.filter((name) => !['PWD', 'SHLVL', '_'].includes(name)).sort()).toEqual(['HOME', 'LANG', 'PATH']);
  });

  it('runs in a PID namespace of its own: /proc/1 is the sandbox\'s, the worker is not in /proc', async () => {
    const result = await run({ command: ['sh', '-c', 'echo $$; ls /proc | grep -E "^[0-9]+$"; tr "\\0" " " < /proc/1/cmdline'] });
    const lines = result.stdout.trim().split('\n');
    const pids = lines.slice(0, -1).map(Number);
    expect(pids.length).toBeLessThan(8);
    expect(pids).not.toContain(process.pid);
    expect(Math.max(...pids)).toBeLessThan(10);
    // Pid 1 is bubblewrap's init inside the namespace, not the machine's.
    expect(lines.at(-1)).toMatch(/^(\S*\/)?bwrap /);
    expect(readFileSync('/proc/1/cmdline', 'utf8')).not.toMatch(/^(\S*\/)?bwrap\0/);
  });

  it('may make no user namespace of its own (a nested one would hold every capability), and what it writes stays the worker\'s', async () => {
    const result = await run({ command: ['sh', '-c', 'unshare -U true && echo made-userns; unshare -Urn id -u && echo made-root; echo written > owned.txt; echo done'] });
    expect(result.stdout).not.toContain('made-userns');
    expect(result.stdout).not.toContain('made-root');
    expect(result.stdout).toContain('done');
    const info = await stat(join(root, 'owned.txt'));
    expect([info.uid, info.gid]).toEqual([process.getuid!(), process.getgid!()]);
    expect(readFileSync(join(root, 'owned.txt'), 'utf8')).toBe('written\n');
  });

  const probe = (target: number) => [
    NODE,
    '-e',
    `require('net').connect(${target}, '127.0.0.1').on('connect', () => { console.log('connected'); process.exit(0); }).on('error', (error) => { console.log(error.code); process.exit(3); })`,
  ];

  it("has no network: the worker's loopback listener is out of reach", async () => {
    expect(await run({ command: probe(port) })).toMatchObject({ exitCode: 3, stdout: 'ECONNREFUSED\n' });
  });

  it('has the network when configured with it', async () => {
    const networked = createRunCommandTool(createWorkspace(root), { sandbox: { kind: 'bubblewrap', bwrap: 'bwrap', network: true, readOnlyPaths: [] } });
    expect(outputOf<CommandResult>(await runTool(networked, { command: probe(port) }))).toMatchObject({ exitCode: 0, stdout: 'connected\n' });
  });

  it('can write only the workspace (and its own fresh /tmp)', async () => {
    const outside = await mkdtemp(join(tmpdir(), 'agentbus-outside-'));
    const scratch = `/tmp/agentbus-sandbox-${process.pid}-${Date.now()}.txt`;
    const systemFile = `/usr/agentbus-sandbox-${process.pid}-${Date.now()}.txt`;
    try {
      const script = `echo in > inside.txt; echo t > ${scratch} && cat ${scratch}; echo x > ${outside}/x.txt || echo outside-refused; echo y > ${systemFile} || echo usr-refused; ls ${outside} || echo outside-absent`;
      const result = await run({ command: ['sh', '-c', script] });
      expect(result.stdout).toBe('t\noutside-refused\nusr-refused\noutside-absent\n');
      expect(readFileSync(join(root, 'inside.txt'), 'utf8')).toBe('in\n');
      expect(readdirSync(outside)).toEqual([]);
      expect(() => readFileSync(scratch)).toThrow();
    } finally {
      // Were the sandbox missing, the command would have written these as the worker: leave nothing behind.
      await Promise.all([rm(outside, { recursive: true, force: true }), rm(scratch, { force: true }), rm(systemFile, { force: true })]);
    }
  });

  it("sees neither another tenant's folder nor /root, /home or the worker's own directory", async () => {
    expect(outputOf(await runAs(tenantTool, 'globex', { command: ['sh', '-c', 'echo globex-secret > secret.txt'] }))).toMatchObject({ exitCode: 0 });
    expect(readFileSync(join(tenantsRoot, 'globex', 'secret.txt'), 'utf8')).toBe('globex-secret\n');
    const script = `pwd; for p in ${tenantsRoot}/globex ${tenantsRoot}/globex/secret.txt /root /home ${process.cwd()}; do test -e "$p" && echo "present $p"; done; ls ${tenantsRoot}; true`;
    const result = outputOf<CommandResult>(await runAs(tenantTool, 'acme', { command: ['sh', '-c', script] }));
    expect(result.stdout).toBe(`${join(tenantsRoot, 'acme')}\nacme\n`);
  });

  it('refuses, naming the install command, where bwrap is missing', async () => {
    const missing = createRunCommandTool(createWorkspace(root), { sandbox: { kind: 'bubblewrap', bwrap: '/nonexistent/bin/bwrap', network: false, readOnlyPaths: [] } });
    const reply = await runTool(missing, { command: ['true'] });
    expect(reply).toMatchObject({ ok: false, error: { code: 'unsupported', retryable: false } });
    if (!reply.ok) expect(reply.error.message).toMatch(/apt-get install bubblewrap.*AGENTBUS_UNSAFE_NO_SANDBOX=1/);
  });

  it('runs unsandboxed only when configured so, and says so in the result', async () => {
    const unsafe = createRunCommandTool(createWorkspace(root), { sandbox: { kind: 'none' } });
    const result = outputOf<CommandResult>(await runTool(unsafe, { command: ['sh', '-c', 'echo $$'] }));
    expect(result.warning).toMatch(/without a sandbox/);
    expect(Number(result.stdout)).toBeGreaterThan(10);
    expect((await run({ command: ['true'] })).warning).toBeUndefined();
  });
});
