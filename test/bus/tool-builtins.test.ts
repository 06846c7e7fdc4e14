import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { mkdir, mkdtemp, readFile, realpath, rm, symlink, writeFile } from 'node:fs/promises';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { pino } from 'pino';
import { createCodec, createSubjects } from '../../src/protocol/index.ts';
import type { ToolCallReply, ToolCallRequest } from '../../src/protocol/index.ts';
import { createToolClient } from '../../src/bus/tool-client.ts';
import { executeToolCall } from '../../src/tool-sdk/index.ts';
import type { AnyToolDefinition } from '../../src/tool-sdk/index.ts';
import { createBuiltInTools, createTenantWorkspaces, createWorkspace, startToolsService } from '../../services/tools/index.ts';
import { READ_FILE_DEFAULT_LINES } from '../../services/tools/read-file-tool.ts';
import { useNatsServer } from '../helpers/nats-fixture.ts';

const logger = pino({ level: 'silent' });
let root: string;
let outsideDir: string;
let tools: Map<string, AnyToolDefinition>;

beforeAll(async () => {
  root = await mkdtemp(join(tmpdir(), 'agentbus-ws-'));
  outsideDir = await mkdtemp(join(tmpdir(), 'agentbus-outside-'));
  await writeFile(join(outsideDir, 'secret.txt'), 'top secret');
  await mkdir(join(root, 'src'));
  await writeFile(join(root, 'src', 'a.txt'), 'one\ntwo\nthree\n');
  await writeFile(join(root, 'big.txt'), Array.from({ length: 3000 }, (_, i) => `line ${i}`).join('\n'));
  await writeFile(join(root, 'blob.bin'), Buffer.from([1, 0, 2, 3]));
  await symlink(outsideDir, join(root, 'escape'));
  await symlink(join(outsideDir, 'secret.txt'), join(root, 'secret-link.txt'));
  await symlink(join(root, 'src', 'a.txt'), join(root, 'inner-link.txt'));
  tools = new Map(createBuiltInTools(createWorkspace(root)).map((tool) => [tool.name, tool]));
});

afterAll(async () => {
  await rm(root, { recursive: true, force: true });
  await rm(outsideDir, { recursive: true, force: true });
});

let sequence = 0;
function callRequest(name: string, args: unknown, tenant = 'default'): ToolCallRequest {
  sequence += 1;
  return { v: 1, callId: `c${sequence}`, effectId: `e${sequence}`, name, args, tenant, sessionId: 's', turnId: 't', deadline: Date.now() + 5000 };
}

function run(name: string, args: unknown): Promise<ToolCallReply> {
  const tool = tools.get(name)!;
  return executeToolCall({ tool, request: callRequest(name, args), logger: () => logger, signal: new AbortController().signal, now: Date.now });
}

function output(reply: ToolCallReply): unknown {
  if (!reply.ok) throw new Error(`expected success, got ${reply.error.code}: ${reply.error.message}`);
  return reply.output;
}

describe('workspace path checks', () => {
  it.each([
    ['a parent-relative path', '../etc/passwd'],
    ['a path that climbs out midway', 'src/../../x'],
    ['an absolute path outside', '/etc/passwd'],
    ['a symlinked directory that points outside', 'escape/secret.txt'],
    ['a symlinked file that points outside', 'secret-link.txt'],
  ])('refuses %s with invalid_arguments', async (_label, path) => {
    const reply = await run('read_file', { path });
    expect(reply).toMatchObject({ ok: false, error: { code: 'invalid_arguments', retryable: false } });
    if (!reply.ok) expect(reply.error.message).toMatch(/outside the workspace/);
  });

  it('refuses to write through a symlink that points outside', async () => {
    const reply = await run('write_file', { path: 'escape/new.txt', content: 'x' });
    expect(reply).toMatchObject({ ok: false, error: { code: 'invalid_arguments' } });
  });

  it('allows an absolute path inside the workspace and a symlink that stays inside', async () => {
    expect(output(await run('read_file', { path: join(root, 'src', 'a.txt') }))).toBe('one\ntwo\nthree');
    expect(output(await run('read_file', { path: 'inner-link.txt' }))).toBe('one\ntwo\nthree');
  });
});

describe('read_file', () => {
  it('returns the lines from offset up to limit with a note that more remains', async () => {
    expect(output(await run('read_file', { path: 'src/a.txt', offset: 1, limit: 1 }))).toBe(
      'two\n[truncated: showed lines 1-1 of 3; call read_file with offset 2 to read on]',
    );
  });

  it('reads a default number of lines from a long file', async () => {
    const text = String(output(await run('read_file', { path: 'big.txt' })));
    expect(text.split('\n')).toHaveLength(READ_FILE_DEFAULT_LINES + 1);
    expect(text).toMatch(/offset 2000 to read on\]$/);
  });

  it('says so for a binary file and answers not_found for a missing one', async () => {
    expect(output(await run('read_file', { path: 'blob.bin' }))).toBe('[blob.bin is a binary file of 4 bytes]');
    expect(await run('read_file', { path: 'nope.txt' })).toMatchObject({ ok: false, error: { code: 'not_found' } });
  });

  it('refuses unknown arguments', async () => {
    expect(await run('read_file', { path: 'src/a.txt', mode: 'x' })).toMatchObject({ ok: false, error: { code: 'invalid_arguments' } });
  });
});

describe('list_dir', () => {
  it('lists entries with type and size, sorted by name', async () => {
    expect(output(await run('list_dir', { path: 'src' }))).toEqual({ path: 'src', entries: [{ name: 'a.txt', type: 'file', size: 14 }] });
    const top = output(await run('list_dir', {})) as { path: string; entries: Array<{ name: string; type: string }> };
    expect(top.path).toBe('.');
    expect(top.entries.map((entry) => `${entry.name}:${entry.type}`)).toEqual([
      'big.txt:file',
      'blob.bin:file',
      'escape:symlink',
      'inner-link.txt:symlink',
      'secret-link.txt:symlink',
      'src:directory',
    ]);
  });
});

describe('write_file', () => {
  it('creates missing directories and writes the content', async () => {
    expect(output(await run('write_file', { path: 'notes/deep/todo.md', content: '- ship\n' }))).toEqual({
      path: join('notes', 'deep', 'todo.md'),
      bytes: 7,
      changed: true,
    });
    expect(await readFile(join(root, 'notes', 'deep', 'todo.md'), 'utf8')).toBe('- ship\n');
  });

  it('changes nothing when the same content is written again', async () => {
    await run('write_file', { path: 'same.txt', content: 'x' });
    expect(output(await run('write_file', { path: 'same.txt', content: 'x' }))).toEqual({ path: 'same.txt', bytes: 1, changed: false });
  });
});

describe('tools service on the bus', () => {
  const nats = useNatsServer();

  it('serves the built-ins on a temp workspace and lists them', async () => {
    const service = await startToolsService({ nc: nats.nc, logger, prefix: 'bt', workspace: root, perTenant: false });
    const client = createToolClient({ nc: nats.nc, subjects: createSubjects('bt'), codec: createCodec(), logger });
    const listed = await client.listTools({});
    expect(listed.map((tool) => `${tool.name}:${tool.tier}`)).toEqual([
      'current_time:read_only',
      'list_dir:read_only',
      'read_file:read_only',
      'run_command:privileged',
      'search_text:read_only',
      'write_file:side_effecting',
    ]);
    expect(listed.find((tool) => tool.name === 'read_file')?.parameters).toMatchObject({ required: ['path'], additionalProperties: false });
    expect(await client.call(callRequest('read_file', { path: 'src/a.txt' }), {})).toMatchObject({ ok: true, output: 'one\ntwo\nthree' });
    expect(await client.call(callRequest('read_file', { path: '../x' }), {})).toMatchObject({ ok: false, error: { code: 'invalid_arguments' } });
    await service.stop();
  });
});

describe('per-tenant workspaces', () => {
  let tenantsRoot: string;
  let perTenant: Map<string, AnyToolDefinition>;
  const runAs = (tenant: string, name: string, args: unknown): Promise<ToolCallReply> =>
    executeToolCall({ tool: perTenant.get(name)!, request: callRequest(name, args, tenant), logger: () => logger, signal: new AbortController().signal, now: Date.now });

  beforeAll(async () => {
    tenantsRoot = await realpath(await mkdtemp(join(tmpdir(), 'agentbus-tenants-')));
    perTenant = new Map(createBuiltInTools(createTenantWorkspaces(tenantsRoot)).map((tool) => [tool.name, tool]));
    expect(output(await runAs('acme', 'write_file', { path: 'plans/secret.md', content: 'acme launch plan\n' }))).toMatchObject({ path: join('plans', 'secret.md'), changed: true });
  });

  afterAll(async () => {
    await rm(tenantsRoot, { recursive: true, force: true });
  });

  it("keeps a tenant's file in <workspace>/<tenant>/, where that tenant reads it", async () => {
    expect(await readFile(join(tenantsRoot, 'acme', 'plans', 'secret.md'), 'utf8')).toBe('acme launch plan\n');
    expect(output(await runAs('acme', 'read_file', { path: 'plans/secret.md' }))).toBe('acme launch plan');
    expect(output(await runAs('acme', 'search_text', { pattern: 'launch' }))).toMatchObject({ matches: [{ path: join('plans', 'secret.md'), line: 1 }] });
  });

  it("does not show acme's file to globex: read_file, list_dir, search_text and run_command", async () => {
    expect(await runAs('globex', 'read_file', { path: 'plans/secret.md' })).toMatchObject({ ok: false, error: { code: 'not_found' } });
    for (const path of ['../acme/plans/secret.md', join(tenantsRoot, 'acme', 'plans', 'secret.md')]) {
      expect(await runAs('globex', 'read_file', { path })).toMatchObject({ ok: false, error: { code: 'invalid_arguments' } });
    }
    expect(output(await runAs('globex', 'list_dir', {}))).toEqual({ path: '.', entries: [] });
    expect(await runAs('globex', 'list_dir', { path: '..' })).toMatchObject({ ok: false, error: { code: 'invalid_arguments' } });
    expect(output(await runAs('globex', 'search_text', { pattern: 'launch' }))).toEqual({ matches: [], filesSearched: 0 });
    expect(await runAs('globex', 'search_text', { pattern: 'launch', path: '..' })).toMatchObject({ ok: false, error: { code: 'invalid_arguments' } });
    const command = output(await runAs('globex', 'run_command', { command: ['sh', '-c', `cat ${tenantsRoot}/acme/plans/secret.md ../acme/plans/secret.md; ls ..`] })) as { stdout: string };
    expect(command.stdout).not.toContain('acme launch plan');
    expect(command.stdout.trim()).toBe('globex');
  });

  it("refuses a symlink out of the tenant's folder, into another tenant's", async () => {
    await mkdir(join(tenantsRoot, 'globex'), { recursive: true });
    await symlink(join(tenantsRoot, 'acme'), join(tenantsRoot, 'globex', 'to-acme'));
    expect(await runAs('globex', 'read_file', { path: 'to-acme/plans/secret.md' })).toMatchObject({ ok: false, error: { code: 'invalid_arguments' } });
    expect(await runAs('globex', 'write_file', { path: 'to-acme/plans/secret.md', content: 'x' })).toMatchObject({ ok: false, error: { code: 'invalid_arguments' } });
    expect(await runAs('globex', 'list_dir', { path: 'to-acme' })).toMatchObject({ ok: false, error: { code: 'invalid_arguments' } });
    expect(await readFile(join(tenantsRoot, 'acme', 'plans', 'secret.md'), 'utf8')).toBe('acme launch plan\n');
  });

  it("refuses a tenant folder that is a symlink rather than a directory", async () => {
    await symlink(join(tenantsRoot, 'acme'), join(tenantsRoot, 'initech'));
    const reply = await runAs('initech', 'read_file', { path: 'plans/secret.md' });
    expect(reply).toMatchObject({ ok: false, error: { code: 'tool_failed' } });
    if (!reply.ok) expect(reply.error.message).toMatch(/not a directory/);
  });

  it('is what the tools service does unless told otherwise', async () => {
    const workspace = createTenantWorkspaces(tenantsRoot);
    expect([workspace.perTenant, createWorkspace(tenantsRoot).perTenant]).toEqual([true, false]);
    await expect(workspace.forTenant('../acme', {})).rejects.toMatchObject({ code: 'invalid_arguments' });
  });
});

describe('tools service on the bus, per tenant (the default)', () => {
  const nats = useNatsServer();

  it("serves acme's files to acme and not to globex", async () => {
    const tenantsRoot = await mkdtemp(join(tmpdir(), 'agentbus-tenants-'));
    const service = await startToolsService({ nc: nats.nc, logger, prefix: 'pt', workspace: tenantsRoot });
    try {
      const client = createToolClient({ nc: nats.nc, subjects: createSubjects('pt'), codec: createCodec(), logger });
      expect(await client.call(callRequest('write_file', { path: 'a.txt', content: 'acme only' }, 'acme'), {})).toMatchObject({ ok: true });
      expect(await client.call(callRequest('read_file', { path: 'a.txt' }, 'acme'), {})).toMatchObject({ ok: true, output: 'acme only' });
      expect(await client.call(callRequest('read_file', { path: 'a.txt' }, 'globex'), {})).toMatchObject({ ok: false, error: { code: 'not_found' } });
      expect(await readFile(join(tenantsRoot, 'acme', 'a.txt'), 'utf8')).toBe('acme only');
    } finally {
      await service.stop();
      await rm(tenantsRoot, { recursive: true, force: true });
    }
  });
});
