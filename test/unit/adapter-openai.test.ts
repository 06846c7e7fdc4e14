import { afterAll, beforeAll, beforeEach, describe, expect, it } from 'vitest';
import { ProviderError } from '../../src/errors.ts';
import { createLogger } from '../../src/logging.ts';
import type { ChunkBody } from '../../src/protocol/index.ts';
import type { AdapterRequest } from '../../services/provider/adapter.ts';
import { createOpenAIAdapter } from '../../services/provider/adapters/openai.ts';
import { withResilience } from '../../services/provider/resilience.ts';
import {
  DONE_FRAME,
  chunk,
  completion,
  dataFrame,
  errorReply,
  startFakeOpenAIServer,
  textStream,
  usageChunk,
} from '../helpers/fake-openai-server.ts';
import type { FakeOpenAIServer } from '../helpers/fake-openai-server.ts';
import { providerSecrets } from '../../services/provider/provider-secrets.ts';

const API_KEY = 'sk-test-0penAI-S3CRET-key-9f8e7d6c';

let server: FakeOpenAIServer;
beforeAll(async () => {
  server = await startFakeOpenAIServer();
});
afterAll(async () => {
  await server.close();
});
beforeEach(() => {
  server.reset();
});

function captureLogger() {
  const lines: string[] = [];
  const logger = createLogger({ name: 'test', level: 'debug', destination: { write: (line: string) => void lines.push(line) } });
  return { logger, lines };
}

async function collect(iterable: AsyncIterable<ChunkBody>): Promise<ChunkBody[]> {
  const chunks: ChunkBody[] = [];
  for await (const item of iterable) chunks.push(item);
  return chunks;
}

const request: AdapterRequest = {
  requestId: 'req-1',
  model: 'gpt-4o-mini',
  messages: [
    { role: 'system', content: 'Be brief.' },
    { role: 'user', content: 'What is in a.txt?' },
    { role: 'assistant', content: '', toolCalls: [{ id: 'call_a', name: 'read_file', args: { path: 'a.txt' } }] },
    { role: 'tool', toolCallId: 'call_a', name: 'read_file', content: 'hello', isError: false },
  ],
  tools: [{ name: 'read_file', description: 'Reads a file.', parameters: { type: 'object', properties: { path: { type: 'string' } } } }],
  maxTokens: 256,
  temperature: 0.2,
};

const signal = () => new AbortController().signal;

describe('OpenAI adapter', () => {
  it('streams text deltas in order, then usage and done, from the Chat Completions wire format', async () => {
    server.enqueue(textStream(['The file ', 'says ', 'hello.'], [31, 4]));
    const adapter = createOpenAIAdapter({ apiKey: API_KEY, baseURL: server.baseURL });
    const chunks = await collect(adapter.generate(request, { signal: signal() }));
    expect(chunks).toEqual([
      { type: 'text-delta', text: 'The file ' },
      { type: 'text-delta', text: 'says ' },
      { type: 'text-delta', text: 'hello.' },
      { type: 'usage', usage: { inputTokens: 31, outputTokens: 4 } },
      { type: 'done', finishReason: 'stop' },
    ]);
  });

  it('sends our messages, tools and limits in Chat Completions form', async () => {
    server.enqueue(textStream(['ok']));
    await collect(createOpenAIAdapter({ apiKey: API_KEY, baseURL: server.baseURL }).generate(request, { signal: signal() }));
    const sent = server.requests[0]!;
    expect(sent.path).toBe('/v1/chat/completions');
    expect(sent.headers.authorization).toBe(`Bearer ${API_KEY}`);
    expect(sent.body).toMatchObject({
      model: 'gpt-4o-mini',
      stream: true,
      stream_options: { include_usage: true },
      max_completion_tokens: 256,
      temperature: 0.2,
      messages: [
        { role: 'system', content: 'Be brief.' },
        { role: 'user', content: 'What is in a.txt?' },
        { role: 'assistant', content: null, tool_calls: [{ id: 'call_a', type: 'function', function: { name: 'read_file', arguments: '{"path":"a.txt"}' } }] },
        { role: 'tool', tool_call_id: 'call_a', content: 'hello' },
      ],
      tools: [{ type: 'function', function: { name: 'read_file', description: 'Reads a file.', parameters: request.tools[0]!.parameters } }],
    });
  });

  it('uses max_tokens for a compatible server such as Ollama', async () => {
    server.enqueue(textStream(['ok']));
    await collect(createOpenAIAdapter({ name: 'ollama', baseURL: server.baseURL }).generate(request, { signal: signal() }));
    expect(server.requests[0]?.body).toMatchObject({ max_tokens: 256 });
    expect(server.requests[0]?.body).not.toHaveProperty('max_completion_tokens');
  });

  it('joins tool-call arguments split across chunks for two calls at once', async () => {
    server.enqueue({
      kind: 'sse',
      frames: [
        dataFrame(chunk({ role: 'assistant', content: null })),
        dataFrame(chunk({ tool_calls: [{ index: 0, id: 'call_1', type: 'function', function: { name: 'read_file', arguments: '' } }] })),
        dataFrame(chunk({ tool_calls: [{ index: 0, function: { arguments: '{"pa' } }] })),
        dataFrame(chunk({ tool_calls: [{ index: 1, id: 'call_2', type: 'function', function: { name: 'list_dir', arguments: '{"di' } }] })),
        dataFrame(chunk({ tool_calls: [{ index: 0, function: { arguments: 'th": "a.txt"}' } }] })),
        dataFrame(chunk({ tool_calls: [{ index: 1, function: { arguments: 'r": "."}' } }] })),
        dataFrame(chunk({}, 'tool_calls')),
        dataFrame(usageChunk(50, 22)),
        DONE_FRAME,
      ],
    });
    const chunks = await collect(createOpenAIAdapter({ apiKey: API_KEY, baseURL: server.baseURL }).generate(request, { signal: signal() }));
    expect(chunks).toEqual([
      { type: 'tool-call', toolCallId: 'call_1', name: 'read_file', args: { path: 'a.txt' } },
      { type: 'tool-call', toolCallId: 'call_2', name: 'list_dir', args: { dir: '.' } },
      { type: 'usage', usage: { inputTokens: 50, outputTokens: 22 } },
      { type: 'done', finishReason: 'tool_calls' },
    ]);
  });

  it('passes arguments that are not JSON on with a marker instead of failing the call', async () => {
    server.enqueue({
      kind: 'sse',
      frames: [
        dataFrame(chunk({ tool_calls: [{ index: 0, id: 'call_1', type: 'function', function: { name: 'read_file', arguments: '{"path": ' } }] })),
        dataFrame(chunk({}, 'tool_calls')),
        DONE_FRAME,
      ],
    });
    const chunks = await collect(createOpenAIAdapter({ apiKey: API_KEY, baseURL: server.baseURL }).generate(request, { signal: signal() }));
    expect(chunks[0]).toMatchObject({ type: 'tool-call', name: 'read_file', args: { _invalidJson: '{"path": ' } });
  });

  it('maps a 500 to a retryable ProviderError and leaves retrying to us (one request only)', async () => {
    server.enqueue(errorReply(500, 'The server had an error', 'server_error'));
    const failure = collect(createOpenAIAdapter({ apiKey: API_KEY, baseURL: server.baseURL }).generate(request, { signal: signal() }));
    await expect(failure).rejects.toBeInstanceOf(ProviderError);
    await expect(failure).rejects.toMatchObject({ status: 500, retryable: true, code: 'provider_error', provider: 'openai' });
    expect(server.requests).toHaveLength(1);
  });

  it('maps a 400 to a ProviderError that is not retried', async () => {
    server.enqueue(errorReply(400, "Invalid value for 'model'", 'invalid_request_error', 'model_not_found'));
    const delays: number[] = [];
    const adapter = withResilience(createOpenAIAdapter({ apiKey: API_KEY, baseURL: server.baseURL }), {
      sleep: async (ms) => void delays.push(ms),
    });
    await expect(collect(adapter.generate(request, { signal: signal() }))).rejects.toMatchObject({ status: 400, retryable: false, code: 'bad_request' });
    expect(delays).toEqual([]);
    expect(server.requests).toHaveLength(1);
  });

  it('retries a 429 after the retry-after it names, announcing the retry first', async () => {
    server.enqueue(errorReply(429, 'Rate limit reached', 'requests', 'rate_limit_exceeded', { 'retry-after': '2' }), textStream(['fine']));
    const delays: number[] = [];
    const adapter = withResilience(createOpenAIAdapter({ apiKey: API_KEY, baseURL: server.baseURL }), {
      sleep: async (ms) => void delays.push(ms),
    });
    const chunks = await collect(adapter.generate(request, { signal: signal() }));
    expect(chunks[0]).toEqual({
      type: 'retry',
      attempt: 2,
      maxAttempts: 4,
      delayMs: 2000,
      error: { code: 'rate_limited', message: expect.stringContaining('Rate limit reached'), retryable: true },
    });
    expect(chunks.slice(1)).toEqual([
      { type: 'text-delta', text: 'fine' },
      { type: 'usage', usage: { inputTokens: 12, outputTokens: 5 } },
      { type: 'done', finishReason: 'stop' },
    ]);
    expect(delays).toEqual([2000]);
  });

  it('falls back to one plain completion when the connection is cut before the first token', async () => {
    server.enqueue(
      { kind: 'sse', frames: [dataFrame(chunk({ role: 'assistant', content: '' })), dataFrame(chunk({ content: '' }))], cutAfter: 2 },
      { kind: 'json', status: 200, body: completion('From the plain call.') },
    );
    const chunks = await collect(createOpenAIAdapter({ apiKey: API_KEY, baseURL: server.baseURL }).generate(request, { signal: signal() }));
    expect(chunks).toEqual([
      { type: 'text-delta', text: 'From the plain call.' },
      { type: 'usage', usage: { inputTokens: 20, outputTokens: 7 } },
      { type: 'done', finishReason: 'stop' },
    ]);
    expect(server.requests.map((sent) => sent.body.stream)).toEqual([true, false]);
  });

  it('falls back on malformed SSE before the first token, tool calls included', async () => {
    server.enqueue(
      { kind: 'sse', frames: ['data: {not json\n\n'] },
      { kind: 'json', status: 200, body: completion(null, { toolCalls: [{ id: 'call_9', name: 'read_file', arguments: '{"path":"b"}' }] }) },
    );
    const chunks = await collect(createOpenAIAdapter({ apiKey: API_KEY, baseURL: server.baseURL }).generate(request, { signal: signal() }));
    expect(chunks[0]).toEqual({ type: 'tool-call', toolCallId: 'call_9', name: 'read_file', args: { path: 'b' } });
    expect(chunks.at(-1)).toEqual({ type: 'done', finishReason: 'tool_calls' });
  });

  it('fails without a fallback or retry when the stream breaks after text came out', async () => {
    server.enqueue({ kind: 'sse', frames: [dataFrame(chunk({ content: 'Half an ans' })), dataFrame(chunk({ content: 'wer' }))], cutAfter: 2 });
    const delays: number[] = [];
    const adapter = withResilience(createOpenAIAdapter({ apiKey: API_KEY, baseURL: server.baseURL }), { sleep: async (ms) => void delays.push(ms) });
    const chunks: ChunkBody[] = [];
    await expect(
      (async () => {
        for await (const item of adapter.generate(request, { signal: signal() })) chunks.push(item);
      })(),
    ).rejects.toMatchObject({ code: 'stream_interrupted' });
    expect(chunks.map((item) => item.type)).toEqual(['text-delta', 'text-delta']);
    expect(server.requests).toHaveLength(1);
    expect(delays).toEqual([]);
  });

  it('aborts the HTTP request when the signal aborts mid-stream, and rejects with the reason', async () => {
    server.enqueue({ kind: 'hang', frames: [dataFrame(chunk({ content: 'Thinking' }))] });
    const controller = new AbortController();
    const reason = new Error('user cancelled');
    const adapter = createOpenAIAdapter({ apiKey: API_KEY, baseURL: server.baseURL });
    const seen: ChunkBody[] = [];
    const run = (async () => {
      for await (const item of adapter.generate(request, { signal: controller.signal })) {
        seen.push(item);
        controller.abort(reason);
      }
    })();
    await expect(run).rejects.toBe(reason);
    expect(seen).toEqual([{ type: 'text-delta', text: 'Thinking' }]);
    await server.requests[0]!.closed;
    expect(server.requests[0]!.clientClosed).toBe(true);
  });

  it('makes no request when the signal is already aborted', async () => {
    const controller = new AbortController();
    controller.abort(new Error('too late'));
    await expect(collect(createOpenAIAdapter({ apiKey: API_KEY, baseURL: server.baseURL }).generate(request, { signal: controller.signal }))).rejects.toThrow(
      'too late',
    );
    expect(server.requests).toHaveLength(0);
  });

  it('reports a refused connection as retryable connection_failed', async () => {
    const closed = await startFakeOpenAIServer();
    const baseURL = closed.baseURL;
    await closed.close();
    await expect(collect(createOpenAIAdapter({ apiKey: API_KEY, baseURL }).generate(request, { signal: signal() }))).rejects.toMatchObject({
      code: 'connection_failed',
      retryable: true,
    });
  });

  it('never lets the API key into a chunk, an error message or a log line', async () => {
    const { logger, lines } = captureLogger();
    server.enqueue(
      errorReply(401, `Incorrect API key provided: ${API_KEY}. You can find your API key at https://platform.openai.com.`, 'invalid_request_error', 'invalid_api_key'),
    );
    const adapter = withResilience(createOpenAIAdapter({ apiKey: API_KEY, baseURL: server.baseURL, logger }), { logger });
    let thrown: unknown;
    try {
      await collect(adapter.generate(request, { signal: signal() }));
    } catch (error) {
      thrown = error;
      logger.error({ err: error }, 'provider call failed');
    }
    expect(thrown).toBeInstanceOf(ProviderError);
    expect((thrown as ProviderError).code).toBe('unauthorized');
    expect((thrown as Error).message).toContain('provided: [REDACTED:configured-secret]. You can find');

    // A 500 that echoes the key goes through the retry path, which logs and yields retry chunks.
    server.enqueue(errorReply(500, `upstream saw Bearer ${API_KEY}`, 'server_error'), textStream(['ok']));
    const chunks = await collect(
      withResilience(createOpenAIAdapter({ apiKey: API_KEY, baseURL: server.baseURL, logger }), { logger, sleep: async () => {} }).generate(request, {
        signal: signal(),
      }),
    );
    // A cut stream logs the fallback with the error.
    server.enqueue({ kind: 'sse', frames: [dataFrame(chunk({ content: '' }))], cutAfter: 1 }, { kind: 'json', status: 200, body: completion('ok') });
    chunks.push(...(await collect(createOpenAIAdapter({ apiKey: API_KEY, baseURL: server.baseURL, logger }).generate(request, { signal: signal() }))));

    const everything = [JSON.stringify(chunks), (thrown as Error).message, (thrown as Error).stack ?? '', ...lines].join('\n');
    expect(lines.length).toBeGreaterThan(2);
    expect(everything).not.toContain(API_KEY);
    expect(everything).not.toContain('S3CRET');
  });

  it("scrubs the credential of a header configured for it (a gateway's key), alone or with its scheme, and keeps other header values", async () => {
    const gatewayKey = 'gw-live-plainwords';
    server.enqueue(errorReply(403, `gateway refused token ${gatewayKey} of team research-team (header Bearer ${gatewayKey})`, 'invalid_request_error'));
    let thrown: unknown;
    try {
      const headers = { 'X-Gateway-Auth': `Bearer ${gatewayKey}`, 'X-Team': 'research-team' };
      await collect(createOpenAIAdapter({ apiKey: API_KEY, baseURL: server.baseURL, defaultHeaders: headers }).generate(request, { signal: signal() }));
    } catch (error) {
      thrown = error;
    }
    expect((thrown as Error).message).toBe('openai: 403 gateway refused token [REDACTED:configured-secret] of team research-team (header [REDACTED:configured-secret])');
    expect(providerSecrets(undefined, { Authorization: 'Bearer abc', Accept: 'application/json' })).toEqual(['Bearer abc', 'abc']);
  });

  it('scrubs secrets that are not its key from the error text, and drops the SDK error that held them', async () => {
    // A gateway in front of the model echoes what it was sent: another service's token and a connection string.
    const token = `ghp_${'aB3dE6gH9jK2mN5pQ8sT1vW4yZ7bC0eF3hI6'}`;
    server.enqueue(errorReply(400, `bad request: upstream used ${token} and postgres://app:Pa55word-x9@db:5432/app`, 'invalid_request_error'));
    let thrown: unknown;
    try {
      await collect(createOpenAIAdapter({ apiKey: API_KEY, baseURL: server.baseURL }).generate(request, { signal: signal() }));
    } catch (error) {
      thrown = error;
    }
    expect(thrown).toBeInstanceOf(ProviderError);
    expect((thrown as Error).message).toBe('openai: 400 bad request: upstream used [REDACTED:github] and [REDACTED:database-connection-string]');
    expect((thrown as Error).cause).toBeUndefined();
  });
});
