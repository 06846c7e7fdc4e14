import { mkdir, mkdtemp, readFile, readdir, realpath, rm, stat, symlink, writeFile } from 'node:fs/promises';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { createBuiltInTools, createTenantWorkspaces, createWorkspace } from '../../services/tools/index.ts';
import type { CommandResult } from '../../services/tools/run-command-tool.ts';
import { sandboxHiddenPaths } from '../../services/tools/sandbox-launch.ts';
import type { ToolCallReply } from '../../src/protocol/index.ts';
import type { AnyToolDefinition } from '../../src/tool-sdk/index.ts';
import { outputOf, runTool } from '../helpers/run-tool.ts';

// The embedded stack of `agentbus up` serves the folder it runs in, and keeps its bus's store and token in that
// folder's `.agentbus/`: no tool may read or change them, nor a configured state folder (AGENTBUS_WORKSPACE_HIDE).

const TOKEN = 'stack-token-5f1c9e';
let root: string;
let tools: Map<string, AnyToolDefinition>;

function toolsOf(workspace: Parameters<typeof createBuiltInTools>[0]): Map<string, AnyToolDefinition> {
  return new Map(createBuiltInTools(workspace).map((tool) => [tool.name, tool]));
}

const call = (name: string, args: unknown, from = tools): Promise<ToolCallReply> => runTool(from.get(name)!, args);

function refusedAsHidden(reply: ToolCallReply): void {
  expect(reply).toMatchObject({ ok: false, error: { code: 'invalid_arguments' } });
  if (!reply.ok) expect(reply.error.message).toMatch(/hidden from the tools/);
}

/** Writes a state folder as `agentbus up` leaves it: a token in stack.json and the server config, a store. */
async function makeState(dir: string): Promise<void> {
  await mkdir(join(dir, 'nats', 'jetstream'), { recursive: true });
  await writeFile(join(dir, 'stack.json'), `{ "url": "nats://127.0.0.1:4222", "token": "${TOKEN}" }\n`, { mode: 0o600 });
  await writeFile(join(dir, 'nats-server.conf'), `authorization { token: "${TOKEN}" }\n`, { mode: 0o600 });
  await writeFile(join(dir, 'nats', 'jetstream', 'meta.inf'), `store ${TOKEN}\n`);
}

beforeAll(async () => {
  root = await realpath(await mkdtemp(join(tmpdir(), 'agentbus-hidden-')));
  await makeState(join(root, '.agentbus'));
  await makeState(join(root, 'state'));
  await writeFile(join(root, 'README.md'), `# project\nnot the ${'stack'}-token here\n`);
  await symlink(join(root, '.agentbus'), join(root, 'state-link'));
  await symlink(join(root, '.agentbus', 'stack.json'), join(root, 'stack-link.json'));
  // `.agentbus` is hidden by default; `state` because it is configured so, as `agentbus up` names its state folder.
  tools = toolsOf(createWorkspace(root, { hide: [join(root, 'state')] }));
});

afterAll(async () => {
  await rm(root, { recursive: true, force: true });
});

describe('the file tools in a workspace that holds the stack state', () => {
  const hiddenPaths = [
    '.agentbus/stack.json',
    '.agentbus',
    './.agentbus/nats/jetstream/meta.inf',
    'src/../.agentbus/nats-server.conf',
    'state/stack.json',
    'state',
    'state-link/stack.json',
    'stack-link.json',
  ];

  it('read_file refuses every path into it: as written, absolute, and through a symlink', async () => {
    for (const path of [...hiddenPaths, join(root, '.agentbus', 'stack.json'), join(root, 'state', 'nats-server.conf')]) {
      refusedAsHidden(await call('read_file', { path }));
    }
    expect(outputOf(await call('read_file', { path: 'README.md' }))).toContain('# project');
  });

  it('write_file refuses it, and the host files stay as they were', async () => {
    for (const path of ['.agentbus/stack.json', '.agentbus/new.txt', 'state/nats/jetstream/meta.inf', 'state-link/stack.json', 'stack-link.json']) {
      refusedAsHidden(await call('write_file', { path, content: 'overwritten' }));
    }
    expect(await readFile(join(root, '.agentbus', 'stack.json'), 'utf8')).toContain(TOKEN);
    expect(await readFile(join(root, 'state', 'nats', 'jetstream', 'meta.inf'), 'utf8')).toContain(TOKEN);
    expect(await readdir(join(root, '.agentbus'))).toEqual(['nats', 'nats-server.conf', 'stack.json']);
  });

  it('list_dir leaves it out of the listing and refuses to list it', async () => {
    const listing = outputOf<{ entries: { name: string }[] }>(await call('list_dir', {}));
    expect(listing.entries.map((entry) => entry.name)).toEqual(['README.md', 'stack-link.json', 'state-link']);
    for (const path of ['.agentbus', '.agentbus/nats', 'state', 'state-link']) refusedAsHidden(await call('list_dir', { path }));
  });

  it('search_text does not walk into it, and refuses to search it', async () => {
    // README.md alone is searched: nothing under .agentbus or state, nor through the symlinks.
    expect(outputOf(await call('search_text', { pattern: TOKEN }))).toEqual({ matches: [], filesSearched: 1 });
    expect(outputOf(await call('search_text', { pattern: 'project' }))).toMatchObject({ matches: [{ path: 'README.md', line: 1 }], filesSearched: 1 });
    for (const path of ['.agentbus', 'state/nats', 'stack-link.json']) refusedAsHidden(await call('search_text', { pattern: TOKEN, path }));
  });

  it('hides each tenant folder\'s own .agentbus and the configured paths in per-tenant workspaces too', async () => {
    const tenantsRoot = await realpath(await mkdtemp(join(tmpdir(), 'agentbus-hidden-tenants-')));
    try {
      await makeState(join(tenantsRoot, 'default', '.agentbus'));
      await makeState(join(tenantsRoot, 'default', 'kept'));
      const perTenant = toolsOf(createTenantWorkspaces(tenantsRoot, { hide: [join(tenantsRoot, 'default', 'kept')] }));
      refusedAsHidden(await call('read_file', { path: '.agentbus/stack.json' }, perTenant));
      refusedAsHidden(await call('read_file', { path: 'kept/stack.json' }, perTenant));
      expect(outputOf(await call('search_text', { pattern: TOKEN }, perTenant))).toEqual({ matches: [], filesSearched: 0 });
    } finally {
      await rm(tenantsRoot, { recursive: true, force: true });
    }
  });

  it('refuses a hidden path that is not absolute', () => {
    expect(() => createWorkspace(root, { hide: ['state'] })).toThrow(/must be absolute/);
  });
});

describe("run_command's sandbox in a workspace that holds the stack state", () => {
  const sh = async (script: string): Promise<CommandResult> => outputOf<CommandResult>(await call('run_command', { command: ['sh', '-c', script] }));

  it('cannot read it: cat and ls see an empty folder, through a symlink too', async () => {
    for (const folder of ['.agentbus', 'state', 'state-link']) {
      const cat = await sh(`cat ${folder}/stack.json`);
      expect(cat.exitCode).not.toBe(0);
      expect(cat.stdout).not.toContain(TOKEN);
      const ls = await sh(`ls -A ${folder}`);
      expect(ls).toMatchObject({ exitCode: 0, stdout: '' });
    }
    const grep = await sh(`grep -r ${TOKEN} . ; true`);
    expect(grep.stdout).not.toContain(TOKEN);
    // The rest of the workspace is as it was.
    expect(await sh('cat README.md')).toMatchObject({ exitCode: 0, stdout: expect.stringContaining('# project') });
  });

  it('cannot write it: touch, rm and a move fail and the host files are untouched', async () => {
    for (const script of ['touch .agentbus/x', 'rm -r .agentbus/nats', 'rm state/stack.json', 'echo broken > .agentbus/stack.json', 'touch state-link/x']) {
      expect((await sh(script)).exitCode, script).not.toBe(0);
    }
    // The mount point itself cannot go away or be renamed: it is busy.
    expect((await sh('mv .agentbus gone')).exitCode).not.toBe(0);
    expect((await sh('rm -rf .agentbus')).exitCode).not.toBe(0);
    expect((await sh('rm -rf state')).exitCode).not.toBe(0);
    expect(await readdir(join(root, '.agentbus'))).toEqual(['nats', 'nats-server.conf', 'stack.json']);
    expect(await readFile(join(root, '.agentbus', 'stack.json'), 'utf8')).toContain(TOKEN);
    expect(await readFile(join(root, 'state', 'stack.json'), 'utf8')).toContain(TOKEN);
    expect(await readFile(join(root, '.agentbus', 'nats', 'jetstream', 'meta.inf'), 'utf8')).toContain(TOKEN);
    await expect(stat(join(root, 'gone'))).rejects.toMatchObject({ code: 'ENOENT' });
  });

  it('refuses to run in it', async () => {
    refusedAsHidden(await call('run_command', { command: ['ls'], cwd: '.agentbus' }));
  });

  it('covers only hidden paths that exist inside the workspace, and makes no mount point for a missing one', async () => {
    const empty = await realpath(await mkdtemp(join(tmpdir(), 'agentbus-hidden-empty-')));
    try {
      await writeFile(join(empty, 'secret'), TOKEN);
      expect(await sandboxHiddenPaths(empty, [join(empty, '.agentbus'), join(empty, 'secret'), '/etc'])).toEqual([{ path: join(empty, 'secret'), kind: 'file' }]);
      // A hidden path inside another is covered with it: a second mount would need a mount point in the read-only tmpfs.
      expect(await sandboxHiddenPaths(root, [join(root, '.agentbus', 'nats'), join(root, '.agentbus')])).toEqual([{ path: join(root, '.agentbus'), kind: 'directory' }]);
      const nested = toolsOf(createWorkspace(root, { hide: [join(root, '.agentbus', 'nats'), join(root, 'state', 'nats', 'jetstream')] }));
      const ls = outputOf<CommandResult>(await call('run_command', { command: ['sh', '-c', 'ls -A .agentbus; echo ---; ls state; ls -A state/nats/jetstream; cat state/nats/jetstream/meta.inf'] }, nested));
      // .agentbus empty (covered whole), state shown, its nats/jetstream empty (covered) and its file not there.
      expect(ls.stdout).toBe('---\nnats\nnats-server.conf\nstack.json\n');
      expect(ls.stderr).toMatch(/meta\.inf/);
      const emptyTools = toolsOf(createWorkspace(empty, { hide: [join(empty, 'secret'), join(empty, 'later')] }));
      const result = outputOf<CommandResult>(await call('run_command', { command: ['sh', '-c', 'cat secret; echo x > secret; ls -A'] }, emptyTools));
      expect(result.stdout).not.toContain(TOKEN);
      expect(await readFile(join(empty, 'secret'), 'utf8')).toBe(TOKEN);
      expect((await readdir(empty)).sort()).toEqual(['secret']);
    } finally {
      await rm(empty, { recursive: true, force: true });
    }
  });
});
