import { pino } from 'pino';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import type { NatsConnection } from '@nats-io/nats-core';
import { busOptionsFromEnv, connectBus } from '../../src/bus/connect.ts';
import { ServiceInboxPrefix } from '../../src/bus/inbox.ts';
import { createToolClient } from '../../src/bus/tool-client.ts';
import { createCodec, createSubjects } from '../../src/protocol/index.ts';
import { MCP_STDIO_SERVER, startAgentbus } from '../helpers/mcp-process.ts';
import type { AgentbusProcess } from '../helpers/mcp-process.ts';
import { toolCallRequest } from '../helpers/run-tool.ts';
import { startShippedNats } from '../helpers/shipped-nats.ts';
import type { ShippedNats } from '../helpers/shipped-nats.ts';

// deploy/nats/nats-server.conf as shipped: `agentbus mcp` logged in as `tools` needs no grant that user lacks.

const silent = pino({ level: 'silent' });
let nats: ShippedNats;
let mcp: AgentbusProcess;
let runtime: NatsConnection;

beforeAll(async () => {
  nats = await startShippedNats();
  const env: NodeJS.ProcessEnv = { ...process.env, NATS_URL: nats.url, NATS_USER: 'tools', NATS_PASSWORD: nats.passwords['tools']! };
  for (const name of ['NATS_TOKEN', 'AGENTBUS_INBOX_PREFIX', 'AGENTBUS_PREFIX', 'LOG_LEVEL', 'MCP_TEST_RECORD']) delete env[name];
  mcp = startAgentbus(['mcp', '--', ...MCP_STDIO_SERVER], env);
  runtime = await connectBus({
    servers: nats.url,
    name: 'permissions-runtime',
    logger: silent,
    ...busOptionsFromEnv({ NATS_USER: 'runtime', NATS_PASSWORD: nats.passwords['runtime']! }, ServiceInboxPrefix.runtime),
  });
  await mcp.waitFor('(Ctrl-C to stop)');
});

afterAll(async () => {
  await mcp?.stop();
  await runtime?.close().catch(() => undefined);
  await nats?.stop();
});

describe('agentbus mcp as the tools user of the shipped config', () => {
  it('is discovered, answers calls and hears cancels, and the server refuses it nothing', async () => {
    const tools = createToolClient({ nc: runtime, subjects: createSubjects('agentbus'), codec: createCodec(), logger: silent });
    expect((await tools.listTools({})).map((tool) => tool.name)).toContain('add');
    expect(await tools.call(toolCallRequest('add', { a: 1, b: 2 }), {})).toMatchObject({ ok: true, output: '3' });
    const controller = new AbortController();
    const running = tools.call(toolCallRequest('slow', { steps: 100, delayMs: 50 }), { signal: controller.signal });
    setTimeout(() => controller.abort(new Error('cancelled by the test')), 300);
    await expect(running).rejects.toThrow(/cancelled by the test/);
    expect(await mcp.stop()).toBe(0);
    expect(nats.output()).not.toMatch(/Violation/);
  });
});
