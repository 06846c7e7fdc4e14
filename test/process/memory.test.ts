import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { connect } from '@nats-io/transport-node';
import type { NatsConnection } from '@nats-io/nats-core';
import { createMemoryClient } from '../../src/bus/memory-client.ts';
import { createCodec } from '../../src/protocol/index.ts';
import { resolveProviderConfig, startProviderService } from '../../services/provider/index.ts';
import type { ProviderService } from '../../services/provider/index.ts';
import { startRuntimeService } from '../../services/runtime/index.ts';
import type { Runtime } from '../../services/runtime/index.ts';
import { startToolsService } from '../../services/tools/index.ts';
import type { ToolsService } from '../../services/tools/index.ts';
import { startFakeOpenAIServer, textStream } from '../helpers/fake-openai-server.ts';
import type { FakeOpenAIServer } from '../helpers/fake-openai-server.ts';
import { startNatsServer } from '../helpers/nats-server.ts';
import type { TestNatsServer } from '../helpers/nats-server.ts';
import { startServiceProcess } from '../helpers/service-process.ts';
import type { ServiceProcess } from '../helpers/service-process.ts';
import { collectEvents, requestJson, silentLogger } from '../helpers/stack.ts';

const codec = createCodec();
let nats: TestNatsServer;
let openai: FakeOpenAIServer;
let client: NatsConnection;
let services: NatsConnection;
let provider: ProviderService;
let tools: ToolsService;
let runtime: Runtime;
let memory: ServiceProcess | undefined;

/** The memory service as its own process; resolves once it has read the log that exists. */
async function startMemory(): Promise<ServiceProcess> {
  const started = startServiceProcess('services/memory/main.ts', { NATS_URL: nats.url });
  await started.waitFor('memory caught up with the log', 30_000);
  return started;
}

/** One turn on the OpenAI-wire fake, answered with `answer`; resolves with how it ended. */
async function turn(tenant: string, sessionId: string, text: string, answer: string): Promise<string | undefined> {
  openai.enqueue(textStream([answer]));
  const watcher = collectEvents(client, tenant, sessionId);
  const reply = await requestJson(client, `agentbus.${tenant}.sessions.${sessionId}.prompt`, { text }, 10_000);
  expect(reply.accepted).toBe(true);
  const events = await watcher.until((seen) => seen.some((event) => event.type === 'turn.ended'), 20_000);
  watcher.stop();
  const ended = events.find((event) => event.type === 'turn.ended');
  return ended?.type === 'turn.ended' ? ended.data.reason : undefined;
}

beforeAll(async () => {
  nats = await startNatsServer();
  openai = await startFakeOpenAIServer();
  client = await connect({ servers: nats.url });
  services = await connect({ servers: nats.url });
  const config = resolveProviderConfig({ providers: { openai: { type: 'openai', apiKey: 'sk-test-memory', baseURL: openai.baseURL } } });
  provider = await startProviderService({ nc: services, logger: silentLogger(), config, script: { responses: [] } });
  tools = await startToolsService({ nc: services, logger: silentLogger() });
  runtime = await startRuntimeService({ nc: await connect({ servers: nats.url }), logger: silentLogger(), config: { defaultModel: 'openai:gpt-test', leaseTtlMs: 3_000, recall: { share: 0.1, timeoutMs: 2_000, k: 5 } } });
  memory = await startMemory();
}, 60_000);

afterAll(async () => {
  await memory?.stop('SIGKILL');
  await runtime?.stop().catch(() => undefined);
  await tools?.stop().catch(() => undefined);
  await provider?.stop().catch(() => undefined);
  await client?.close();
  await services?.close();
  await openai?.close();
  await nats?.stop();
});

describe('memory, its own process on the bus', () => {
  it('finds a fact told in one session in a later one of the same tenant, never in another tenant', async () => {
    expect(await turn('acme', 'fruit-1', 'Remember this: my favourite fruit is the kumquat.', 'Noted, the kumquat.')).toBe('yielded');
    expect(await turn('globex', 'other-1', 'Our office plant is a ficus.', 'A ficus, noted.')).toBe('yielded');
    const memoryClient = createMemoryClient({ nc: client, codec });
    await expect.poll(async () => (await memoryClient.search('acme', { query: 'favourite fruit' })).hits.map((hit) => hit.sessionId), { timeout: 10_000 }).toContain('fruit-1');
    const acme = await memoryClient.search('acme', { query: 'kumquat', k: 10 });
    expect(acme.mode).toBe('full-text');
    expect(acme.hits.some((hit) => hit.type === 'user.message' && hit.text.includes('kumquat') && hit.seq > 0)).toBe(true);
    expect((await memoryClient.search('globex', { query: 'kumquat favourite fruit', k: 10 })).hits).toEqual([]);
    expect((await memoryClient.search('acme', { query: 'ficus plant office', k: 10 })).hits).toEqual([]);
    // The tool the model can call searches the calling session's tenant only.
    const toolReply = await client.request('agentbus.tools.memory_search.call', codec.encode({ v: 1, callId: 'c1', effectId: 'e1', name: 'memory_search', args: { query: 'kumquat' }, tenant: 'globex', sessionId: 'x', turnId: 't', deadline: Date.now() + 5_000 }), { timeout: 5_000 });
    expect(codec.decode(toolReply.data)).toMatchObject({ ok: true, output: 'Nothing in memory matches.' });
  });

  it('puts what it recalls in a new session\'s provider request, under "Relevant context from memory:"', async () => {
    openai.reset();
    expect(await turn('acme', 'fruit-2', 'Which fruit is my favourite?', 'The kumquat.')).toBe('yielded');
    const request = openai.requests.find((recorded) => recorded.path.endsWith('/chat/completions'));
    const messages = request?.body['messages'] as Array<{ role: string; content: string }>;
    const section = messages.find((message) => message.role === 'system' && message.content.startsWith('Relevant context from memory:'));
    expect(section?.content).toContain('my favourite fruit is the kumquat');
    expect(section?.content).not.toContain('ficus');
  });

  it('answers the same after it was killed and restarted: it reads the log again', async () => {
    const memoryClient = createMemoryClient({ nc: client, codec });
    const search = async () => (await memoryClient.search('acme', { query: 'kumquat', k: 10 })).hits.map((hit) => [hit.sessionId, hit.seq, hit.text]);
    // Memory indexes in batches: wait until it holds the previous test's answer (the log's newest kumquat), so that
    // `before` is the whole log's answer, as a restarted instance's is.
    await expect.poll(async () => (await search()).some(([sessionId, , text]) => sessionId === 'fruit-2' && text === 'The kumquat.'), { timeout: 15_000 }).toBe(true);
    const before = await search();
    await memory!.stop('SIGKILL');
    memory = await startMemory();
    // A restarted instance answers from full text until its first query embedding comes back in time: the same hits
    // once it has caught up and fuses vectors again.
    await expect.poll(search, { timeout: 15_000 }).toEqual(before);
  }, 60_000);

  it('lists sessions in stable pages, with no repeats or gaps while sessions are being created', async () => {
    const memoryClient = createMemoryClient({ nc: client, codec });
    for (let index = 0; index < 6; index++) expect(await turn('paged', `early-${index}`, `hello ${index}`, 'hi')).toBe('yielded');
    await expect.poll(async () => (await memoryClient.listSessions('paged', { limit: 100 })).sessions.length, { timeout: 10_000 }).toBe(6);
    const seen: string[] = [];
    let pageToken: string | undefined;
    let created = 0;
    do {
      const page = await memoryClient.listSessions('paged', { limit: 2, ...(pageToken ? { pageToken } : {}) });
      seen.push(...page.sessions.map((session) => session.sessionId));
      pageToken = page.nextPageToken;
      // A new session while paging: it may appear at the end, never in the middle or twice.
      if (created < 3) expect(await turn('paged', `late-${created++}`, 'another', 'hi')).toBe('yielded');
    } while (pageToken);
    expect(new Set(seen).size).toBe(seen.length);
    expect(seen.slice(0, 6)).toEqual(['early-0', 'early-1', 'early-2', 'early-3', 'early-4', 'early-5']);
    const first = (await memoryClient.listSessions('paged', { limit: 1 })).sessions[0]!;
    expect(first).toMatchObject({ sessionId: 'early-0', turns: 1, lastText: 'hi' });
    await expect(memoryClient.listSessions('paged', { pageToken: 'not-a-token' })).rejects.toMatchObject({ code: 'invalid_input' });
    await expect(memoryClient.search('paged', { query: '' })).rejects.toMatchObject({ code: 'invalid_input' });
  }, 90_000);

  it('lets turns yield when memory is stopped', async () => {
    await memory!.stop('SIGKILL');
    memory = undefined;
    expect(await turn('acme', 'no-memory', 'Which fruit is my favourite?', 'I do not know.')).toBe('yielded');
  });
});
