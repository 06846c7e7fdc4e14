import { readFileSync, readdirSync, realpathSync } from 'node:fs';
import { mkdtemp, readFile, rm } from 'node:fs/promises';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { pino } from 'pino';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { createToolClient } from '../../src/bus/tool-client.ts';
import type { ToolClient } from '../../src/bus/tool-client.ts';
import { UsageError } from '../../cli/context.ts';
import { parseMcp } from '../../cli/mcp-options.ts';
import { mcpLaunch } from '../../src/mcp/index.ts';
import { createCodec, createSubjects } from '../../src/protocol/index.ts';
import { MCP_STDIO_SERVER, startAgentbus } from '../helpers/mcp-process.ts';
import type { AgentbusProcess } from '../helpers/mcp-process.ts';
import { useNatsServer } from '../helpers/nats-fixture.ts';
import { toolCallRequest } from '../helpers/run-tool.ts';
import { ROOT } from '../helpers/service-process.ts';

const nats = useNatsServer();
const MARKER = `mcp-unlisted-${process.pid}-${Date.now()}`;
let directory: string;
let tools: ToolClient;

/** This process's environment without the bus's variables or the test server's, plus `extra`. */
function cleanEnv(extra: Record<string, string>): NodeJS.ProcessEnv {
  const env: NodeJS.ProcessEnv = {};
  for (const [name, value] of Object.entries(process.env)) if (!/^(NATS_|AGENTBUS_|MCP_TEST_|LOG_LEVEL$)/.test(name)) env[name] = value;
  return { ...env, MCP_TEST_UNLISTED: MARKER, ...extra };
}

/** Host pids of live test MCP servers, with the pid each has in its own PID namespace (the same when it has none). */
function testServers(): Array<{ pid: number; namespacePid: number; environ: string }> {
  const found: Array<{ pid: number; namespacePid: number; environ: string }> = [];
  for (const name of readdirSync('/proc').filter((entry) => /^\d+$/.test(entry))) {
    try {
      const cmdline = readFileSync(`/proc/${name}/cmdline`, 'utf8');
      if (!cmdline.startsWith('node\0') || !cmdline.includes('mcp-stdio-server.ts')) continue;
      const status = readFileSync(`/proc/${name}/status`, 'utf8');
      if (/^State:\s+Z/m.test(status)) continue;
      const nspids = (/^NSpid:\s+(.*)$/m.exec(status)?.[1] ?? name).trim().split(/\s+/).map(Number);
      found.push({ pid: Number(name), namespacePid: nspids.at(-1)!, environ: readFileSync(`/proc/${name}/environ`, 'utf8') });
    } catch {
      // gone meanwhile
    }
  }
  return found;
}

beforeAll(async () => {
  directory = await mkdtemp(join(tmpdir(), 'agentbus-mcp-sandbox-'));
  tools = createToolClient({ nc: nats.nc, subjects: createSubjects('agentbus'), codec: createCodec(), logger: pino({ level: 'silent' }), discoveryTtlMs: 0 });
});

afterAll(async () => {
  await rm(directory, { recursive: true, force: true });
});

describe('agentbus mcp --env and --sandbox flags', () => {
  it('reads --env names, --sandbox with its network and read-only paths, and refuses what cannot work', () => {
    const options = parseMcp(['--env', 'GITHUB_TOKEN', '--env', 'GITHUB_TOKEN', '--sandbox', '--sandbox-network', '--sandbox-read', '/opt/node', '--', 'node', 'server.js']);
    expect([options.env, options.sandbox]).toEqual([['GITHUB_TOKEN'], { network: true, readOnlyPaths: ['/opt/node'] }]);
    expect(parseMcp(['--', 'node']).sandbox).toBeUndefined();
    const cases: Array<[string[], RegExp]> = [
      [['--env', 'NATS_PASSWORD', '--', 'node'], /bus's variables/],
      [['--env', 'AGENTBUS_PREFIX', '--', 'node'], /bus's variables/],
      [['--env', 'A=B', '--', 'node'], /--env takes a variable name/],
      [['--env', 'X', '--url', 'http://h/mcp'], /--env goes with a command/],
      [['--sandbox', '--url', 'http://h/mcp'], /--sandbox goes with a command/],
      [['--sandbox-network', '--', 'node'], /--sandbox-network goes with --sandbox/],
      [['--sandbox', '--sandbox-read', 'relative', '--', 'node'], /absolute path/],
    ];
    for (const [argv, message] of cases) expect(() => parseMcp(argv), argv.join(' ')).toThrow(message);
    expect(() => parseMcp(['--env', 'NATS_URL', '--', 'node'])).toThrow(UsageError);
  });

  it('starts a sandboxed server under bwrap with the workspace writable and no network unless asked', () => {
    const source = { kind: 'stdio' as const, command: 'node', args: ['server.js'], env: { PATH: '/usr/bin', TOKEN: 't' }, cwd: '/srv/project' };
    expect(mcpLaunch(source)).toEqual({ command: 'node', args: ['server.js'], env: { PATH: '/usr/bin', TOKEN: 't' }, cwd: '/srv/project' });
    const launch = mcpLaunch({ ...source, sandbox: { bwrap: '/usr/bin/bwrap', workspace: '/srv/project', network: false, readOnlyPaths: [] } });
    expect(launch.command).toBe('/usr/bin/bwrap');
    expect(launch.env).toEqual({ PATH: '/usr/bin', TOKEN: 't' });
    expect(launch.args.slice(launch.args.indexOf('--'))).toEqual(['--', 'node', 'server.js']);
    expect(launch.args).toContain('--unshare-net');
    expect(launch.args.join(' ')).toContain('--bind /srv/project /srv/project --chdir /srv/project');
    expect(launch.args.join(' ')).toContain('--setenv TOKEN t');
    expect(launch.args.join(' ')).toContain('--setenv HOME /tmp');
    expect(launch.args.join(' ')).toContain('--setenv PATH /usr/bin');
    expect(mcpLaunch({ ...source, sandbox: { bwrap: '/usr/bin/bwrap', workspace: '/srv/project', network: true, readOnlyPaths: [] } }).args).not.toContain('--unshare-net');
  });
});

describe('agentbus mcp stdio servers', () => {
  let mcp: AgentbusProcess | undefined;

  afterAll(async () => {
    await mcp?.stop();
  });

  it('get only PATH, HOME, LANG and what --env names of its environment', async () => {
    const record = join(directory, 'record.jsonl');
    mcp = startAgentbus(
      ['mcp', '--nats', nats.server.url, '--name', 'env-mcp', '--prefix', 'env_', '--env', 'MCP_TEST_RECORD', '--', ...MCP_STDIO_SERVER],
      cleanEnv({ MCP_TEST_RECORD: record, MCP_TEST_STDERR: 'unlisted-stderr-line', NATS_USER: 'nobody-here' }),
    );
    await mcp.waitFor('(Ctrl-C to stop)');
    const started = (await readFile(record, 'utf8')).split('\n').filter(Boolean).map((line) => JSON.parse(line) as { event: string; pid?: number });
    const pid = started.find((entry) => entry.event === 'started')!.pid!;
    const names = readFileSync(`/proc/${pid}/environ`, 'utf8').split('\0').filter(Boolean).map((entry) => entry.slice(0, entry.indexOf('=')));
    expect(names).toContain('PATH');
    expect(names).toContain('MCP_TEST_RECORD');
    for (const name of ['MCP_TEST_UNLISTED', 'MCP_TEST_STDERR', 'NATS_USER']) expect(names).not.toContain(name);
    expect(mcp.stderr()).not.toContain('unlisted-stderr-line');
    expect(await mcp.stop()).toBe(0);
    mcp = undefined;
  });

  it('run under --sandbox in a PID namespace of their own, with the allow-listed environment only, and die with agentbus mcp', async () => {
    // The test server's dependencies: node_modules may be a link to a folder outside the repository.
    const modules = realpathSync(join(ROOT, 'node_modules'));
    const before = new Set(testServers().map((server) => server.pid));
    mcp = startAgentbus(
      ['mcp', '--nats', nats.server.url, '--name', 'sandboxed-mcp', '--prefix', 'sbx_', '--sandbox', '--sandbox-read', modules, '--env', 'MCP_TEST_STDERR', '--', ...MCP_STDIO_SERVER],
      cleanEnv({ MCP_TEST_STDERR: 'sandboxed-server-up' }),
    );
    await mcp.waitFor('(Ctrl-C to stop)', 40_000);
    expect(mcp.stderr()).toContain('sandboxed-server-up');
    const reply = await tools.call(toolCallRequest('sbx_echo', { text: 'hi' }, 20_000), {});
    expect(reply).toMatchObject({ ok: true, output: { text: 'hi' } });
    // The pid the server sees is that of its own namespace.
    const inside = (reply.ok ? (reply.output as { pid: number }) : { pid: -1 }).pid;
    expect(inside).toBeLessThan(10);
    const mine = testServers().filter((server) => !before.has(server.pid));
    expect(mine).toHaveLength(1);
    expect(mine[0]!.namespacePid).toBe(inside);
    expect(mine[0]!.pid).not.toBe(inside);
    expect(mine[0]!.environ).not.toContain(MARKER);
    expect(mine[0]!.environ).toContain('MCP_TEST_STDERR=sandboxed-server-up');
    expect(await mcp.stop()).toBe(0);
    mcp = undefined;
    await expect.poll(() => testServers().filter((server) => server.pid === mine[0]!.pid), { timeout: 5_000 }).toEqual([]);
  }, 60_000);
});
