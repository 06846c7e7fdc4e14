import { mkdtemp, readFile, readdir, rm, writeFile } from 'node:fs/promises';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { connect } from '@nats-io/transport-node';
import { pino } from 'pino';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { createToolClient } from '../../src/bus/tool-client.ts';
import { startLocalStack } from '../../cli/local-stack.ts';
import type { LocalStack } from '../../cli/local-stack.ts';
import { createCodec, createSubjects } from '../../src/protocol/index.ts';
import { useNatsServer } from '../helpers/nats-fixture.ts';
import { toolCallRequest } from '../helpers/run-tool.ts';

// What `agentbus up` / `ask` give the tools service: the embedded stack is one user's own folder (one workspace, as
// the README's first `ask "What is in this folder?"` needs); a stack on a bus of its own keeps a folder per tenant.

const nats = useNatsServer();
let folder: string;

beforeAll(async () => {
  folder = await mkdtemp(join(tmpdir(), 'agentbus-local-ws-'));
  await writeFile(join(folder, 'README.md'), '# My project\n');
});

afterAll(async () => {
  await rm(folder, { recursive: true, force: true });
});

async function withTools(stack: LocalStack, run: (call: (name: string, args: unknown) => Promise<unknown>) => Promise<void>): Promise<void> {
  // The embedded server asks for its token.
  const nc = await connect({ servers: stack.url, ...(stack.token === undefined ? {} : { token: stack.token }) });
  try {
    const client = createToolClient({ nc, subjects: createSubjects('agentbus'), codec: createCodec(), logger: pino({ level: 'silent' }) });
    await run((name, args) => client.call(toolCallRequest(name, args, 20_000), {}));
  } finally {
    await nc.close();
    await stack.stop();
  }
}

describe('the workspace of the local stack', () => {
  it('is the folder itself on the embedded bus: tenant default reads README.md and writes beside it', async () => {
    const stateDir = await mkdtemp(join(tmpdir(), 'agentbus-local-state-'));
    try {
      const stack = await startLocalStack({ stateDir, services: ['tools'], workspace: folder, env: {} });
      expect(stack.embedded).toBe(true);
      await withTools(stack, async (call) => {
        expect(await call('read_file', { path: 'README.md' })).toMatchObject({ ok: true, output: '# My project' });
        expect(await call('write_file', { path: 'embedded.md', content: 'e' })).toMatchObject({ ok: true });
      });
      expect(await readFile(join(folder, 'embedded.md'), 'utf8')).toBe('e');
    } finally {
      await rm(stateDir, { recursive: true, force: true });
    }
  }, 60_000);

  it("hides the embedded bus's state folder inside the workspace from every tool, whatever its name", async () => {
    const project = await mkdtemp(join(tmpdir(), 'agentbus-local-hide-'));
    try {
      await writeFile(join(project, 'README.md'), '# Hidden state\n');
      const stack = await startLocalStack({ stateDir: join(project, 'state'), services: ['tools'], workspace: project, env: {} });
      await withTools(stack, async (call) => {
        expect(await call('list_dir', {})).toMatchObject({ ok: true, output: { entries: [{ name: 'README.md' }] } });
        expect(await call('list_dir', { path: 'state' })).toMatchObject({ ok: false, error: { code: 'invalid_arguments' } });
        expect(await call('read_file', { path: 'state/nats' })).toMatchObject({ ok: false, error: { code: 'invalid_arguments' } });
        expect(await call('write_file', { path: 'state/x', content: 'x' })).toMatchObject({ ok: false, error: { code: 'invalid_arguments' } });
      });
      expect(await readdir(join(project, 'state'))).not.toContain('x');
    } finally {
      await rm(project, { recursive: true, force: true });
    }
  }, 60_000);

  it('is a folder per tenant on a given bus (--nats), unless AGENTBUS_WORKSPACE_PER_TENANT=0', async () => {
    const stack = await startLocalStack({ url: nats.server.url, stateDir: folder, services: ['tools'], workspace: folder, env: {} });
    await withTools(stack, async (call) => {
      expect(await call('read_file', { path: 'README.md' })).toMatchObject({ ok: false, error: { code: 'not_found' } });
      expect(await call('write_file', { path: 'shared.md', content: 's' })).toMatchObject({ ok: true });
    });
    expect(await readFile(join(folder, 'default', 'shared.md'), 'utf8')).toBe('s');
    const single = await startLocalStack({ url: nats.server.url, stateDir: folder, services: ['tools'], workspace: folder, env: { AGENTBUS_WORKSPACE_PER_TENANT: '0' } });
    await withTools(single, async (call) => {
      expect(await call('read_file', { path: 'README.md' })).toMatchObject({ ok: true, output: '# My project' });
    });
  }, 60_000);
});
