import { afterAll, beforeAll, beforeEach, describe, expect, it } from 'vitest';
import { ProviderError } from '../../src/errors.ts';
import { createLogger } from '../../src/logging.ts';
import type { ChunkBody } from '../../src/protocol/index.ts';
import type { AdapterRequest } from '../../services/provider/adapter.ts';
import { createAnthropicAdapter, toAnthropicMessages } from '../../services/provider/adapters/anthropic.ts';
import { withResilience } from '../../services/provider/resilience.ts';
import {
  PING,
  errorFrame,
  errorReply,
  message,
  messageEnd,
  messageStart,
  startFakeAnthropicServer,
  textBlock,
  textStream,
  toolUseBlock,
} from '../helpers/fake-anthropic-server.ts';
import type { FakeSseServer } from '../helpers/fake-anthropic-server.ts';

const API_KEY = 'sk-ant-api03-T0PS3CRET-anthropic-key-0123456789';

let server: FakeSseServer;
beforeAll(async () => {
  server = await startFakeAnthropicServer();
});
afterAll(async () => {
  await server.close();
});
beforeEach(() => {
  server.reset();
});

async function collect(iterable: AsyncIterable<ChunkBody>): Promise<ChunkBody[]> {
  const chunks: ChunkBody[] = [];
  for await (const item of iterable) chunks.push(item);
  return chunks;
}

const signal = () => new AbortController().signal;
const adapter = (extra: { logger?: ReturnType<typeof createLogger> } = {}) => createAnthropicAdapter({ apiKey: API_KEY, baseURL: server.url, ...extra });

const request: AdapterRequest = {
  requestId: 'req-1',
  model: 'claude-sonnet-5',
  messages: [
    { role: 'system', content: 'Be brief.' },
    { role: 'user', content: 'Read a.txt and b.txt' },
    {
      role: 'assistant',
      content: 'Reading both.',
      toolCalls: [
        { id: 'toolu_a', name: 'read_file', args: { path: 'a.txt' } },
        { id: 'toolu_b', name: 'read_file', args: { path: 'b.txt' } },
      ],
    },
    { role: 'tool', toolCallId: 'toolu_a', name: 'read_file', content: 'alpha' },
    { role: 'tool', toolCallId: 'toolu_b', name: 'read_file', content: 'no such file', isError: true },
  ],
  tools: [{ name: 'read_file', description: 'Reads a file.', parameters: { type: 'object', properties: { path: { type: 'string' } }, required: ['path'] } }],
};

describe('Anthropic adapter', () => {
  it('streams text and tool calls from the full Messages event sequence', async () => {
    server.enqueue({
      kind: 'sse',
      frames: [
        messageStart(42),
        PING,
        ...textBlock(0, ['Let me ', 'look.']),
        ...toolUseBlock(1, 'toolu_1', 'read_file', ['{"pa', 'th": "c', '.txt"}']),
        ...toolUseBlock(2, 'toolu_2', 'list_dir', ['']),
        ...messageEnd('tool_use', 37),
      ],
    });
    const chunks = await collect(adapter().generate(request, { signal: signal() }));
    expect(chunks).toEqual([
      { type: 'text-delta', text: 'Let me ' },
      { type: 'text-delta', text: 'look.' },
      { type: 'tool-call', toolCallId: 'toolu_1', name: 'read_file', args: { path: 'c.txt' } },
      { type: 'tool-call', toolCallId: 'toolu_2', name: 'list_dir', args: {} },
      { type: 'usage', usage: { inputTokens: 42, outputTokens: 37 } },
      { type: 'done', finishReason: 'tool_calls' },
    ]);
  });

  it('sends system, merged tool results, tool_use blocks, tools and the default max_tokens', async () => {
    server.enqueue(textStream(['ok']));
    await collect(adapter().generate(request, { signal: signal() }));
    const sent = server.requests[0]!;
    expect(sent.path).toBe('/v1/messages');
    // SDK 1.x sends the key as a bearer token; older ones used x-api-key.
    expect(sent.headers.authorization ?? sent.headers['x-api-key']).toContain(API_KEY);
    expect(sent.body).toEqual({
      model: 'claude-sonnet-5',
      max_tokens: 4096,
      stream: true,
      system: 'Be brief.',
      thinking: { type: 'disabled' },
      messages: [
        { role: 'user', content: [{ type: 'text', text: 'Read a.txt and b.txt' }] },
        {
          role: 'assistant',
          content: [
            { type: 'text', text: 'Reading both.' },
            { type: 'tool_use', id: 'toolu_a', name: 'read_file', input: { path: 'a.txt' } },
            { type: 'tool_use', id: 'toolu_b', name: 'read_file', input: { path: 'b.txt' } },
          ],
        },
        {
          role: 'user',
          content: [
            { type: 'tool_result', tool_use_id: 'toolu_a', content: 'alpha' },
            { type: 'tool_result', tool_use_id: 'toolu_b', content: 'no such file', is_error: true },
          ],
        },
      ],
      tools: [{ name: 'read_file', description: 'Reads a file.', input_schema: request.tools[0]!.parameters }],
    });
  });

  it('answers without tools over a history of tool calls (final answer, --force-finish) in a form the API accepts', async () => {
    // The fake server refuses tool_use blocks with no tools defined, as the real API does (400).
    server.enqueue(textStream(['From what I read: alpha.']));
    const chunks = await collect(adapter().generate({ ...request, tools: [] }, { signal: signal() }));
    expect(chunks.filter((chunk) => chunk.type === 'text-delta').map((chunk) => (chunk as { text: string }).text).join('')).toBe('From what I read: alpha.');
    const sent = server.requests[0]!.body;
    expect(sent.tool_choice).toEqual({ type: 'none' });
    expect(sent.tools).toEqual([{ name: 'read_file', description: 'Not available in this call: answer in text.', input_schema: { type: 'object' } }]);
  });

  it('is refused by the fake server as by the API when tool_use blocks come with no tools', async () => {
    const { default: Anthropic } = await import('@anthropic-ai/sdk');
    const client = new Anthropic({ apiKey: API_KEY, baseURL: server.url, maxRetries: 0 });
    const { messages } = toAnthropicMessages(request.messages);
    await expect(client.messages.create({ model: 'claude-sonnet-5', max_tokens: 10, messages })).rejects.toMatchObject({ status: 400 });
  });

  it('sends no tools and no tool_choice when neither the call nor the history has any', async () => {
    server.enqueue(textStream(['hi']));
    await collect(adapter().generate({ ...request, messages: [{ role: 'user', content: 'hi' }], tools: [] }, { signal: signal() }));
    expect(server.requests[0]!.body.tools).toBeUndefined();
    expect(server.requests[0]!.body.tool_choice).toBeUndefined();
  });

  it('puts a user message that follows tool results into the same user turn, after them', () => {
    const { messages } = toAnthropicMessages([
      { role: 'assistant', content: '', toolCalls: [{ id: 't1', name: 'x', args: {} }] },
      { role: 'tool', toolCallId: 't1', name: 'x', content: 'done' },
      { role: 'user', content: 'and now?' },
    ]);
    expect(messages).toEqual([
      { role: 'assistant', content: [{ type: 'tool_use', id: 't1', name: 'x', input: {} }] },
      {
        role: 'user',
        content: [
          { type: 'tool_result', tool_use_id: 't1', content: 'done' },
          { type: 'text', text: 'and now?' },
        ],
      },
    ]);
  });

  it('maps 529 overloaded_error to a retryable error and retries it', async () => {
    server.enqueue(errorReply(529, 'overloaded_error', 'Overloaded'), textStream(['back']));
    const delays: number[] = [];
    const resilient = withResilience(adapter(), { sleep: async (ms) => void delays.push(ms), random: () => 0.5 });
    const chunks = await collect(resilient.generate(request, { signal: signal() }));
    expect(chunks[0]).toMatchObject({ type: 'retry', attempt: 2, delayMs: 375, error: { code: 'overloaded', retryable: true } });
    expect(chunks[1]).toEqual({ type: 'text-delta', text: 'back' });
    expect(delays).toEqual([375]);
  });

  it('keeps the status and type of a 529 on the ProviderError', async () => {
    server.enqueue(errorReply(529, 'overloaded_error', 'Overloaded'));
    const failure = collect(adapter().generate(request, { signal: signal() }));
    await expect(failure).rejects.toBeInstanceOf(ProviderError);
    await expect(failure).rejects.toMatchObject({ status: 529, code: 'overloaded', retryable: true, provider: 'anthropic' });
  });

  it('retries an overloaded error event that arrives inside the stream before any text', async () => {
    server.enqueue({ kind: 'sse', frames: [messageStart(5), errorFrame('overloaded_error', 'Overloaded')] }, textStream(['second try']));
    const resilient = withResilience(adapter(), { sleep: async () => {} });
    const chunks = await collect(resilient.generate(request, { signal: signal() }));
    expect(chunks.map((item) => item.type)).toEqual(['retry', 'text-delta', 'usage', 'done']);
    expect(server.requests.map((sent) => sent.body.stream)).toEqual([true, true]);
  });

  it('does not retry a spend-limit 429', async () => {
    server.enqueue({
      kind: 'json',
      status: 429,
      body: { type: 'error', error: { type: 'rate_limit_error', message: 'Spend limit reached', details: { error_code: 'enforced_spend_limit_reached' } } },
    });
    const resilient = withResilience(adapter(), { sleep: async () => {} });
    await expect(collect(resilient.generate(request, { signal: signal() }))).rejects.toMatchObject({ code: 'spend_limit', retryable: false });
    expect(server.requests).toHaveLength(1);
  });

  it('falls back to one plain Messages call when the connection is cut before the first token', async () => {
    server.enqueue(
      { kind: 'sse', frames: [messageStart(8), PING], cutAfter: 2 },
      { kind: 'json', status: 200, body: message([{ type: 'text', text: 'Plain answer.' }, { type: 'tool_use', id: 'toolu_9', name: 'read_file', input: { path: 'z' } }], 'tool_use') },
    );
    const chunks = await collect(adapter().generate(request, { signal: signal() }));
    expect(chunks).toEqual([
      { type: 'text-delta', text: 'Plain answer.' },
      { type: 'tool-call', toolCallId: 'toolu_9', name: 'read_file', args: { path: 'z' } },
      { type: 'usage', usage: { inputTokens: 30, outputTokens: 9 } },
      { type: 'done', finishReason: 'tool_calls' },
    ]);
    expect(server.requests.map((sent) => sent.body.stream)).toEqual([true, false]);
  });

  it('fails with stream_interrupted, and no fallback, when the stream ends early after text', async () => {
    server.enqueue({ kind: 'sse', frames: [messageStart(8), ...textBlock(0, ['partial'])] });
    await expect(collect(adapter().generate(request, { signal: signal() }))).rejects.toMatchObject({ code: 'stream_interrupted', retryable: true });
    expect(server.requests).toHaveLength(1);
  });

  it('aborts the HTTP request when the signal aborts mid-stream', async () => {
    server.enqueue({ kind: 'hang', frames: [messageStart(3), ...textBlock(0, ['Hmm']).slice(0, 2)] });
    const controller = new AbortController();
    const reason = new Error('cancelled by user');
    const run = (async () => {
      for await (const item of adapter().generate(request, { signal: controller.signal })) {
        if (item.type === 'text-delta') controller.abort(reason);
      }
    })();
    await expect(run).rejects.toBe(reason);
    await server.requests[0]!.closed;
    expect(server.requests[0]!.clientClosed).toBe(true);
  });

  it('never lets the API key into a chunk, an error message or a log line', async () => {
    const lines: string[] = [];
    const logger = createLogger({ name: 'test', level: 'debug', destination: { write: (line: string) => void lines.push(line) } });
    server.enqueue(errorReply(401, 'authentication_error', `invalid x-api-key: ${API_KEY}`));
    let thrown: unknown;
    try {
      await collect(withResilience(adapter({ logger }), { logger }).generate(request, { signal: signal() }));
    } catch (error) {
      thrown = error;
      logger.error({ err: error }, 'provider call failed');
    }
    expect(thrown).toMatchObject({ code: 'unauthorized', status: 401, retryable: false });
    server.enqueue(errorReply(529, 'overloaded_error', `overloaded for key ${API_KEY}`), textStream(['ok']));
    const chunks = await collect(withResilience(adapter({ logger }), { logger, sleep: async () => {} }).generate(request, { signal: signal() }));
    const everything = [JSON.stringify(chunks), (thrown as Error).message, (thrown as Error).stack ?? '', ...lines].join('\n');
    expect(lines.length).toBeGreaterThan(2);
    expect(everything).not.toContain(API_KEY);
    expect(everything).not.toContain('T0PS3CRET');
  });
});
