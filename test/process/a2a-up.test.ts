import { spawn } from 'node:child_process';
import { randomUUID } from 'node:crypto';
import { mkdtemp, rm, writeFile } from 'node:fs/promises';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { afterAll, beforeAll, expect, it } from 'vitest';
import { Role, TaskState } from '@a2a-js/sdk';
import { ClientFactory, ClientFactoryOptions, JsonRpcTransportFactory } from '@a2a-js/sdk/client';
import { parseServices } from '../../cli/up.ts';
import { AGENTBUS_BIN, offlineEnv } from '../helpers/agentbus-bin.ts';

// `agentbus up` starts the A2A server beside the dashboard. On its embedded bus, which lets in only the holder of the
// stack's token, the A2A server asks for a token of its own too (made per start, printed once): any user of the
// machine reaches its loopback port, and a call runs the agent and its tools.

let workdir: string;

beforeAll(async () => {
  workdir = await mkdtemp(join(tmpdir(), 'agentbus-a2a-up-'));
  await writeFile(join(workdir, 'script.json'), JSON.stringify({ responses: [{ text: 'Up and answering over A2A.' }] }));
});

afterAll(async () => {
  if (workdir) await rm(workdir, { recursive: true, force: true });
});

it('starts the A2A server by default; on the embedded bus its calls need the bearer token it prints', async () => {
  expect(parseServices(undefined)).toEqual(expect.arrayContaining(['dashboard', 'a2a']));
  const args = ['up', '--services', 'runtime,provider,a2a', '--script', 'script.json'];
  const up = spawn(process.execPath, [AGENTBUS_BIN, ...args], { cwd: workdir, env: { ...offlineEnv(), AGENTBUS_MODEL: 'scripted:default' } });
  let output = '';
  up.stderr.on('data', (chunk: Buffer) => (output += chunk.toString()));
  const exited = new Promise<number | null>((resolve) => up.once('exit', resolve));
  try {
    // The lines after `agentbus is up` may come in a later chunk of stderr: wait for the A2A line itself.
    const a2aLine = /A2A: (http:\/\/127\.0\.0\.1:\d+)\/\.well-known\/agent-card\.json \(calls need Authorization: Bearer ([A-Za-z0-9_-]{43})\)/;
    await expect.poll(() => a2aLine.test(output), { timeout: 60_000 }).toBe(true);
    const line = a2aLine.exec(output);
    expect(line, output).not.toBeNull();
    const [, url, token] = line as unknown as [string, string, string];
    // Without the token: refused. With it (the SDK client's headers), a message runs a turn of the stack.
    const bare = await fetch(`${url}/a2a/jsonrpc`, { method: 'POST', headers: { 'Content-Type': 'application/json' }, body: '{"jsonrpc":"2.0","id":1,"method":"tasks/get","params":{"id":"x.y"}}' });
    expect(bare.status).toBe(401);
    const withToken: typeof fetch = (input, init) => {
      const headers = new Headers(init?.headers);
      headers.set('Authorization', `Bearer ${token}`);
      return fetch(input, { ...init, headers });
    };
    const factory = new ClientFactory(ClientFactoryOptions.createFrom(ClientFactoryOptions.default, { transports: [new JsonRpcTransportFactory({ fetchImpl: withToken })] }));
    const client = await factory.createFromUrl(url);
    expect((await client.getAgentCard()).securityRequirements).toEqual([{ schemes: { bearer: { list: [] } } }]);
    const message = { messageId: randomUUID(), contextId: '', taskId: '', role: Role.ROLE_USER, parts: [{ content: { $case: 'text' as const, value: 'Are you there?' }, metadata: undefined, filename: '', mediaType: 'text/plain' }], metadata: undefined, extensions: [], referenceTaskIds: [] };
    const task = (await client.sendMessage({ tenant: '', message, configuration: undefined, metadata: undefined })) as { status?: { state: TaskState }; artifacts: Array<{ parts: Array<{ content?: { value: unknown } }> }> };
    expect(task.status?.state).toBe(TaskState.TASK_STATE_COMPLETED);
    expect(task.artifacts[0]?.parts[0]?.content?.value).toBe('Up and answering over A2A.');
  } finally {
    up.kill('SIGINT');
    expect(await exited).toBe(0);
  }
}, 120_000);
