import { mkdtemp, rm, writeFile } from 'node:fs/promises';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import type { Msg, NatsConnection } from '@nats-io/nats-core';
import { connect } from '@nats-io/transport-node';
import { afterAll, beforeAll, beforeEach, describe, expect, it } from 'vitest';
import { createLogger } from '../../src/logging.ts';
import { createCodec } from '../../src/protocol/index.ts';
import type { AgentEvent } from '../../src/protocol/index.ts';
import { resolveProviderConfig, startProviderService } from '../../services/provider/index.ts';
import type { ProviderService } from '../../services/provider/index.ts';
import { startRuntimeService } from '../../services/runtime/index.ts';
import type { Runtime } from '../../services/runtime/index.ts';
import { startToolsService } from '../../services/tools/index.ts';
import type { ToolsService } from '../../services/tools/index.ts';
import * as anthropicWire from '../helpers/fake-anthropic-server.ts';
import type { FakeSseServer } from '../helpers/fake-anthropic-server.ts';
import * as openaiWire from '../helpers/fake-openai-server.ts';
import type { FakeOpenAIServer } from '../helpers/fake-openai-server.ts';
import { startNatsServer } from '../helpers/nats-server.ts';
import type { TestNatsServer } from '../helpers/nats-server.ts';
import { collectEvents, requestJson } from '../helpers/stack.ts';

// Distinctive keys: none of them may show up on the bus or in a log line.
const OPENAI_KEY = 'sk-proj-AGENTBUSLEAKCHECK-openai-5c1e0d7f9a';
const ANTHROPIC_KEY = 'sk-ant-api03-AGENTBUSLEAKCHECK-anthropic-81b2';
const FLAKY_KEY = 'flaky-AGENTBUSLEAKCHECK-key-3d94';
const KEYS = [OPENAI_KEY, ANTHROPIC_KEY, FLAKY_KEY];
const MARKER = 'AGENTBUSLEAKCHECK';

const codec = createCodec();
let nats: TestNatsServer;
let openai: FakeOpenAIServer;
let anthropic: FakeSseServer;
let flaky: FakeOpenAIServer;
let workspace: string;
let client: NatsConnection;
const connections: NatsConnection[] = [];
let provider: ProviderService;
let tools: ToolsService;
let runtime: Runtime;
const logLines: string[] = [];
const busPayloads: Array<{ subject: string; text: string }> = [];

beforeAll(async () => {
  nats = await startNatsServer();
  [openai, anthropic, flaky] = await Promise.all([
    openaiWire.startFakeOpenAIServer(),
    anthropicWire.startFakeAnthropicServer(),
    openaiWire.startFakeOpenAIServer(),
  ]);
  workspace = await mkdtemp(join(tmpdir(), 'agentbus-ws-'));
  await writeFile(join(workspace, 'README.md'), '# Demo workspace\nHello from the workspace.\n');

  // Every service logs at debug into one capture, through the production logger (same redaction).
  const destination = { write: (line: string) => void logLines.push(line) };
  const logger = (name: string) => createLogger({ name, level: 'debug', destination });

  client = await connect({ servers: nats.url });
  // Everything our services publish, including provider chunks on reply inboxes. Not `>`: a catch-all
  // subscriber would answer for unserved providers, and no_responders could not be tested.
  const spy = (_error: unknown, message: Msg) => {
      let text = Buffer.from(message.data).toString('utf8');
      if (message.headers) text += `\n${[...message.headers.keys()].map((key) => `${key}: ${message.headers?.values(key).join(',')}`).join('\n')}`;
      if (message.subject.startsWith('agentbus.') || message.subject.startsWith('_INBOX.')) {
        try {
          text += `\n${JSON.stringify(codec.decode(message.data, message.headers?.get('Content-Type')))}`;
        } catch {
          // Not every message is ours to decode (JetStream acks, empty cancels).
        }
      }
      busPayloads.push({ subject: message.subject, text });
  };
  const watched = ['agentbus.*.sessions.>', 'agentbus.tools.>', '_INBOX.>', '$JS.>', '$KV.>', '$SRV.>'];
  for (const name of ['openai', 'anthropic', 'flaky', 'scripted']) watched.push(`agentbus.provider.${name}.>`);
  for (const subject of watched) client.subscribe(subject, { callback: spy });
  await client.flush();

  const config = resolveProviderConfig({
    providers: {
      openai: { type: 'openai', apiKey: OPENAI_KEY, baseURL: openai.baseURL },
      anthropic: { type: 'anthropic', apiKey: ANTHROPIC_KEY, baseURL: anthropic.url },
      flaky: { type: 'openai', apiKey: FLAKY_KEY, baseURL: flaky.baseURL },
    },
    pricing: {
      'openai:gpt-test': { input: 1, output: 2 },
      'openai:gpt-small': { input: 0.1, output: 0.2 },
      'anthropic:claude-test': { input: 3, output: 15 },
    },
    retry: { maxAttempts: 2, baseDelayMs: 10, maxDelayMs: 20 },
    circuitBreaker: { failureThreshold: 2, resetTimeoutMs: 60_000 },
  });
  const open = async () => {
    const connection = await connect({ servers: nats.url });
    connections.push(connection);
    return connection;
  };
  provider = await startProviderService({ nc: await open(), logger: logger('provider'), config, script: { responses: [] } });
  tools = await startToolsService({ nc: await open(), logger: logger('tools'), workspace, perTenant: false });
  runtime = await startRuntimeService({ nc: await open(), logger: logger('runtime'), config: { leaseTtlMs: 3000, defaultModel: 'openai:gpt-test' } });
});

afterAll(async () => {
  await runtime?.stop().catch(() => undefined);
  await tools?.stop().catch(() => undefined);
  await provider?.stop().catch(() => undefined);
  for (const connection of [...connections, client]) await connection?.close().catch(() => undefined);
  await nats?.stop();
  await Promise.all([openai?.close(), anthropic?.close(), flaky?.close()]);
  if (workspace) await rm(workspace, { recursive: true, force: true });
});

beforeEach(() => {
  openai.reset();
  anthropic.reset();
  flaky.reset();
});

const ended = (events: AgentEvent[]) => events.find((event) => event.type === 'turn.ended');
const isEnded = (events: AgentEvent[]) => ended(events) !== undefined;
const ofType = <T extends AgentEvent['type']>(events: AgentEvent[], type: T) =>
  events.filter((event): event is Extract<AgentEvent, { type: T }> => event.type === type);

/** Sends a prompt as an outside client would and waits for its `turn.ended`. */
async function runTurn(sessionId: string, body: Record<string, unknown>, timeoutMs = 15_000): Promise<AgentEvent[]> {
  const watcher = collectEvents(client, 'default', sessionId);
  try {
    const reply = await requestJson(client, `agentbus.default.sessions.${sessionId}.prompt`, body);
    expect(reply).toMatchObject({ accepted: true });
    return [...(await watcher.until(isEnded, timeoutMs))];
  } finally {
    watcher.stop();
  }
}

/** An OpenAI stream that asks for read_file with its arguments split over three chunks. */
function openaiToolCall(id: string, argumentPieces: readonly string[] = ['{"pa', 'th": "READ', 'ME.md"}']): openaiWire.FakeReply {
  const { chunk, dataFrame, usageChunk, DONE_FRAME } = openaiWire;
  return {
    kind: 'sse',
    frames: [
      dataFrame(chunk({ role: 'assistant', content: null })),
      dataFrame(chunk({ tool_calls: [{ index: 0, id, type: 'function', function: { name: 'read_file', arguments: '' } }] })),
      ...argumentPieces.map((piece) => dataFrame(chunk({ tool_calls: [{ index: 0, function: { arguments: piece } }] }))),
      dataFrame(chunk({}, 'tool_calls')),
      dataFrame(usageChunk(120, 30)),
      DONE_FRAME,
    ],
  };
}

/** An Anthropic stream with a little text, then a read_file tool_use whose JSON comes in pieces. */
function anthropicToolCall(id: string): anthropicWire.FakeReply {
  const { messageStart, textBlock, toolUseBlock, messageEnd } = anthropicWire;
  return {
    kind: 'sse',
    frames: [
      messageStart(150),
      ...textBlock(0, ['Let me ', 'read it.']),
      ...toolUseBlock(1, id, 'read_file', ['{"pa', 'th": "READ', 'ME.md"}']),
      ...messageEnd('tool_use', 40),
    ],
  };
}

describe('a turn through runtime, provider service and tools on real provider adapters', () => {
  it('runs an OpenAI tool call and answer, with cost, and sends the tool result back', async () => {
    openai.enqueue(openaiToolCall('call_1'), openaiWire.textStream(['The workspace ', 'says hello.'], [200, 12]));
    const events = await runTurn('openai-1', { text: 'What does the README say?', model: 'openai:gpt-test' });

    expect(ended(events)).toMatchObject({ data: { reason: 'yielded', text: 'The workspace says hello.', steps: 2 } });
    expect(ofType(events, 'tool.use')[0]?.data).toMatchObject({ toolCallId: 'call_1', name: 'read_file', args: { path: 'README.md' } });
    const result = ofType(events, 'tool.result')[0]?.data;
    expect(result).toMatchObject({ toolCallId: 'call_1', isError: false });
    expect(result?.output).toContain('Hello from the workspace');
    const messages = ofType(events, 'assistant.message').map((event) => event.data);
    expect(messages.map((message) => message.model)).toEqual(['openai:gpt-test', 'openai:gpt-test']);
    expect(messages[0]?.usage).toEqual({ inputTokens: 120, outputTokens: 30 });
    expect(messages[0]?.cost).toBeCloseTo((120 * 1 + 30 * 2) / 1e6, 12);
    expect(messages.every((message) => message.cost > 0)).toBe(true);
    const turnEnded = ended(events);
    expect(turnEnded?.type === 'turn.ended' && turnEnded.data.cost).toBeCloseTo(messages[0]!.cost + messages[1]!.cost, 12);

    expect(openai.requests).toHaveLength(2);
    expect(openai.requests[0]?.path).toBe('/v1/chat/completions');
    expect(openai.requests[0]?.body).toMatchObject({ model: 'gpt-test', stream: true });
    const second = openai.requests[1]?.body.messages as Array<Record<string, unknown>>;
    const toolMessage = second.find((message) => message.role === 'tool');
    expect(toolMessage).toMatchObject({ role: 'tool', tool_call_id: 'call_1' });
    expect(String(toolMessage?.content)).toContain('Hello from the workspace');
    expect(second.find((message) => message.role === 'assistant')).toMatchObject({
      tool_calls: [{ id: 'call_1', function: { name: 'read_file', arguments: '{"path":"README.md"}' } }],
    });
  });

  it('runs an Anthropic tool call and answer, with cost, and sends the tool result back', async () => {
    anthropic.enqueue(anthropicToolCall('toolu_1'), anthropicWire.textStream(['It says ', 'hello.'], [300, 8]));
    const events = await runTurn('anthropic-1', { text: 'What does the README say?', model: 'anthropic:claude-test' });

    expect(ended(events)).toMatchObject({ data: { reason: 'yielded', text: 'It says hello.', steps: 2 } });
    expect(ofType(events, 'tool.use')[0]?.data).toMatchObject({ toolCallId: 'toolu_1', name: 'read_file', args: { path: 'README.md' } });
    expect(ofType(events, 'tool.result')[0]?.data).toMatchObject({ toolCallId: 'toolu_1', isError: false });
    const messages = ofType(events, 'assistant.message').map((event) => event.data);
    expect(messages[0]).toMatchObject({ text: 'Let me read it.', model: 'anthropic:claude-test', usage: { inputTokens: 150, outputTokens: 40 } });
    expect(messages[0]?.cost).toBeCloseTo((150 * 3 + 40 * 15) / 1e6, 12);
    const turnEnded = ended(events);
    expect(turnEnded?.type === 'turn.ended' && turnEnded.data.cost).toBeGreaterThan(0);

    expect(anthropic.requests).toHaveLength(2);
    expect(anthropic.requests[0]?.path).toBe('/v1/messages');
    const second = anthropic.requests[1]?.body.messages as Array<{ role: string; content: unknown }>;
    const toolResult = second
      .flatMap((message) => (Array.isArray(message.content) ? (message.content as Array<Record<string, unknown>>) : []))
      .find((block) => block.type === 'tool_result');
    expect(toolResult).toMatchObject({ type: 'tool_result', tool_use_id: 'toolu_1' });
    expect(JSON.stringify(toolResult?.content)).toContain('Hello from the workspace');
  });

  it('uses the default model when the prompt names none', async () => {
    openai.enqueue(openaiWire.textStream(['default answer']));
    const events = await runTurn('default-model-1', { text: 'hi' });
    expect(ofType(events, 'assistant.message')[0]?.data.model).toBe('openai:gpt-test');
    expect(ended(events)).toMatchObject({ data: { reason: 'yielded', text: 'default answer' } });
  });
});

describe('fallback between providers', () => {
  it('moves to the next model when a provider keeps failing, then skips it while its circuit is open', async () => {
    anthropic.enqueue(anthropicWire.textStream(['answered by claude']), anthropicWire.textStream(['claude again']));
    const prompt = { text: 'hello', model: 'flaky:gpt-flaky', models: ['anthropic:claude-test'] };
    const first = await runTurn('fallback-1', prompt);

    expect(ended(first)).toMatchObject({ data: { reason: 'yielded', text: 'answered by claude' } });
    expect(ofType(first, 'assistant.message').map((event) => event.data.model)).toEqual(['anthropic:claude-test']);
    const retries = ofType(first, 'retry').map((event) => event.data);
    // The provider service retried the flaky model once, then the runtime moved on.
    expect(retries[0]).toMatchObject({ attempt: 2, maxAttempts: 2, model: 'flaky:gpt-flaky', error: { code: 'provider_error' } });
    expect(retries.at(-1)).toMatchObject({
      attempt: 2,
      maxAttempts: 2,
      delayMs: 0,
      model: 'flaky:gpt-flaky',
      nextModel: 'anthropic:claude-test',
      error: { code: 'provider_error', retryable: true },
    });
    expect(flaky.requests).toHaveLength(2);

    const second = await runTurn('fallback-2', prompt);
    expect(ended(second)).toMatchObject({ data: { reason: 'yielded', text: 'claude again' } });
    expect(ofType(second, 'retry').map((event) => event.data)).toEqual([
      expect.objectContaining({ model: 'flaky:gpt-flaky', nextModel: 'anthropic:claude-test', error: expect.objectContaining({ code: 'circuit_open' }) }),
    ]);
    // An open circuit fails fast: no HTTP request reached the flaky server.
    expect(flaky.requests).toHaveLength(2);
  });

  it('moves on after a refused key and keeps the key out of the error it reports', async () => {
    openai.enqueue(openaiWire.errorReply(401, `Incorrect API key provided: ${OPENAI_KEY}.`, 'invalid_request_error', 'invalid_api_key'));
    anthropic.enqueue(anthropicWire.textStream(['fine']));
    const events = await runTurn('fallback-401', { text: 'hello', model: 'openai:gpt-test', models: ['anthropic:claude-test'] });
    expect(ended(events)).toMatchObject({ data: { reason: 'yielded', text: 'fine' } });
    const change = ofType(events, 'retry').find((event) => event.data.nextModel !== undefined)?.data;
    expect(change).toMatchObject({ model: 'openai:gpt-test', nextModel: 'anthropic:claude-test', error: { code: 'unauthorized' } });
    expect(change?.error.message).toContain('Incorrect API key provided');
    expect(change?.error.message).not.toContain(MARKER);
  });

  it('fails the turn when the last model fails too', async () => {
    const events = await runTurn('fallback-none', { text: 'hello', model: 'nowhere:model', models: ['flaky:gpt-flaky'] });
    expect(ended(events)).toMatchObject({ data: { reason: 'failed', error: { code: 'circuit_open' } } });
    expect(ofType(events, 'retry').map((event) => event.data)).toEqual([
      expect.objectContaining({ model: 'nowhere:model', nextModel: 'flaky:gpt-flaky', error: expect.objectContaining({ code: 'no_responders' }) }),
    ]);
  });
});

describe('small model first', () => {
  it('escalates to the large model after the small one sends invalid tool arguments twice', async () => {
    openai.enqueue(openaiToolCall('call_bad_1', ['{"path": ', '5}']), openaiToolCall('call_bad_2', ['{"path": "READ']));
    anthropic.enqueue(anthropicWire.textStream(['Escalated answer.']));
    const events = await runTurn('escalate-1', { text: 'read the README', smallModel: 'openai:gpt-small', largeModel: 'anthropic:claude-test' });

    expect(ended(events)).toMatchObject({ data: { reason: 'yielded', text: 'Escalated answer.', steps: 3 } });
    const results = ofType(events, 'tool.result').map((event) => event.data);
    expect(results.map((result) => result.error?.code)).toEqual(['invalid_arguments', 'invalid_arguments']);
    expect(ofType(events, 'assistant.message').map((event) => event.data.model)).toEqual(['openai:gpt-small', 'openai:gpt-small', 'anthropic:claude-test']);
    expect(openai.requests.map((request) => request.body.model)).toEqual(['gpt-small', 'gpt-small']);
    expect(anthropic.requests).toHaveLength(1);
  });

  it('starts on the large model when the prompt is flagged complex', async () => {
    anthropic.enqueue(anthropicWire.textStream(['Thought hard.']));
    const events = await runTurn('escalate-2', { text: 'prove it', smallModel: 'openai:gpt-small', largeModel: 'anthropic:claude-test', complex: true });
    expect(ofType(events, 'assistant.message').map((event) => event.data.model)).toEqual(['anthropic:claude-test']);
    expect(openai.requests).toHaveLength(0);
  });
});

describe('budgets and cancel', () => {
  it('ends the turn budget_exceeded when the cost passes maxCost', async () => {
    openai.enqueue(openaiToolCall('call_cost'));
    const events = await runTurn('budget-1', { text: 'read it', model: 'openai:gpt-test', maxCost: 0.000_01 });
    const turnEnded = ended(events);
    expect(turnEnded).toMatchObject({ data: { reason: 'budget_exceeded' } });
    expect(turnEnded?.type === 'turn.ended' && turnEnded.data.cost).toBeGreaterThan(0.000_01);
    // The call the model asked for is closed, not run.
    expect(ofType(events, 'tool.use')).toHaveLength(0);
    expect(ofType(events, 'tool.result')[0]?.data).toMatchObject({ toolCallId: 'call_cost', isError: true, error: { code: 'budget_exceeded' } });
    expect(openai.requests).toHaveLength(1);
  });

  it('closes the provider HTTP request when the turn is cancelled while streaming', async () => {
    const { chunk, dataFrame } = openaiWire;
    openai.enqueue({ kind: 'hang', frames: [dataFrame(chunk({ role: 'assistant', content: '' })), dataFrame(chunk({ content: 'Thinking about it' }))] });
    const watcher = collectEvents(client, 'default', 'cancel-1');
    await requestJson(client, 'agentbus.default.sessions.cancel-1.prompt', { text: 'take your time', model: 'openai:gpt-test' });
    await watcher.until((events) => events.some((event) => event.type === 'assistant.delta'));
    expect(await requestJson(client, 'agentbus.default.sessions.cancel-1.cancel', {})).toMatchObject({ ok: true });
    const events = await watcher.until(isEnded, 5000);
    watcher.stop();
    expect(ended(events)).toMatchObject({ data: { reason: 'cancelled' } });
    const request = openai.requests[0]!;
    await Promise.race([request.closed, new Promise((_, reject) => setTimeout(() => reject(new Error('HTTP request still open')), 3000))]);
    expect(request.clientClosed).toBe(true);
  });
});

describe('API keys', () => {
  it('appear in no bus message and no log line of any service', async () => {
    // Give the last publishes and log writes a moment to arrive.
    await client.flush();
    await new Promise((resolve) => setTimeout(resolve, 200));
    expect(busPayloads.length).toBeGreaterThan(100);
    expect(logLines.length).toBeGreaterThan(20);
    expect(busPayloads.some((payload) => payload.subject.startsWith('agentbus.provider.'))).toBe(true);
    for (const payload of busPayloads) {
      for (const key of KEYS) expect(payload.text, `bus message on ${payload.subject}`).not.toContain(key);
      expect(payload.text, `bus message on ${payload.subject}`).not.toContain(MARKER);
    }
    for (const line of logLines) {
      for (const key of KEYS) expect(line).not.toContain(key);
      expect(line).not.toContain(MARKER);
    }
    // The provider configuration was logged, with its keys as set/unset only.
    expect(logLines.some((line) => line.includes('provider configuration') && line.includes('"apiKey":"set"') && line.includes(flaky.baseURL))).toBe(true);
  });
});
