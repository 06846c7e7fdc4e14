import { spawn } from 'node:child_process';
import { mkdtemp, rm, writeFile } from 'node:fs/promises';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { afterAll, beforeAll, expect, it } from 'vitest';
import { connect } from '@nats-io/transport-node';
import { parseServices } from '../../cli/up.ts';
import { AGENTBUS_BIN } from '../helpers/agentbus-bin.ts';
import { chunkOf, isTerminator, promptStream } from '../helpers/agent-protocol-caller.ts';
import { startNatsServer } from '../helpers/nats-server.ts';
import type { TestNatsServer } from '../helpers/nats-server.ts';

// `agentbus up --agents FILE` starts the Synadia Agent Protocol host beside the services it names, on the given bus.

let server: TestNatsServer;
let workdir: string;

beforeAll(async () => {
  server = await startNatsServer();
  workdir = await mkdtemp(join(tmpdir(), 'agentbus-agents-up-'));
  await writeFile(join(workdir, 'agents.json'), JSON.stringify({ agents: [{ owner: 'acme', name: 'desk', tenant: 'acme', session: 'desk' }] }));
  await writeFile(join(workdir, 'script.json'), JSON.stringify({ responses: [{ text: 'Up and answering.' }] }));
});

afterAll(async () => {
  await server?.stop();
  if (workdir) await rm(workdir, { recursive: true, force: true });
});

it('starts the agents service only when given an agents config, and a protocol caller is answered through it', async () => {
  // Without --agents (or AGENTBUS_AGENTS) up starts what it always did.
  expect(parseServices(undefined)).not.toContain('agents');
  const env: NodeJS.ProcessEnv = { ...process.env, AGENTBUS_MODEL: 'scripted:default', AGENTBUS_DASHBOARD_PORT: '0' };
  for (const name of ['OPENAI_API_KEY', 'ANTHROPIC_API_KEY', 'OLLAMA_HOST', 'AGENTBUS_CONFIG', 'AGENTBUS_AGENTS']) delete env[name];
  const args = ['up', '--nats', server.url, '--services', 'runtime,provider', '--script', 'script.json', '--agents', 'agents.json'];
  const up = spawn(process.execPath, [AGENTBUS_BIN, ...args], { cwd: workdir, env });
  let output = '';
  up.stderr.on('data', (chunk: Buffer) => (output += chunk.toString()));
  const exited = new Promise<number | null>((resolve) => up.once('exit', resolve));
  const caller = await connect({ servers: server.url, inboxPrefix: '_INBOX.agents' });
  try {
    await expect.poll(() => output, { timeout: 60_000 }).toContain('agentbus is up');
    expect(output).toContain(': runtime, provider, agents');
    const messages = await promptStream(caller, 'agents.prompt.agentbus.acme.desk', 'Are you there?', { timeoutMs: 30_000 });
    expect(messages[0]?.text).toBe('{"type":"status","data":"ack"}');
    expect(messages.slice(1, -1).map(chunkOf).filter((chunk) => chunk.type === 'response').map((chunk) => chunk.data).join('')).toBe('Up and answering.');
    expect(isTerminator(messages.at(-1)!)).toBe(true);
  } finally {
    await caller.close();
    up.kill('SIGINT');
    expect(await exited).toBe(0);
  }
}, 120_000);
