import { afterAll, beforeAll, beforeEach, describe, expect, it } from 'vitest';
import { ProviderError } from '../../src/errors.ts';
import type { ChunkBody } from '../../src/protocol/index.ts';
import type { AdapterRequest, ProviderAdapter } from '../../services/provider/adapter.ts';
import { createAnthropicAdapter } from '../../services/provider/adapters/anthropic.ts';
import { createOpenAIAdapter, strictCompatible } from '../../services/provider/adapters/openai.ts';
import { withJsonActions } from '../../services/provider/json-action.ts';
import { startFakeAnthropicServer, textStream as anthropicText } from '../helpers/fake-anthropic-server.ts';
import type { FakeSseServer } from '../helpers/fake-anthropic-server.ts';
import { completion, startFakeOpenAIServer, textStream as openAIText } from '../helpers/fake-openai-server.ts';
import type { FakeOpenAIServer } from '../helpers/fake-openai-server.ts';

// A typed prompt's outputSchema through the real SDK clients to local fake servers, which refuse a malformed
// structured-output field with a 400 as the APIs do (test/helpers/fake-*-server.ts).

const closed = {
  type: 'object',
  properties: { files: { type: 'integer' }, names: { type: 'array', items: { type: 'string' } } },
  required: ['files', 'names'],
  additionalProperties: false,
};
const open = { type: 'object', properties: { files: { type: 'integer' }, note: { type: 'string' } }, required: ['files'] };
const tools = [{ name: 'list_dir', description: 'Lists a folder.', parameters: { type: 'object', properties: { path: { type: 'string' } } } }];
const request = (outputSchema?: Record<string, unknown>): AdapterRequest => ({
  requestId: 'req-typed',
  model: 'm',
  messages: [
    { role: 'system', content: 'Be brief.' },
    { role: 'user', content: 'How many files?' },
  ],
  tools,
  ...(outputSchema ? { outputSchema } : {}),
});
const signal = () => new AbortController().signal;

async function collect(iterable: AsyncIterable<ChunkBody>): Promise<ChunkBody[]> {
  const chunks: ChunkBody[] = [];
  for await (const chunk of iterable) chunks.push(chunk);
  return chunks;
}
const textOf = (chunks: readonly ChunkBody[]) => chunks.map((chunk) => (chunk.type === 'text-delta' ? chunk.text : '')).join('');

describe('OpenAI adapter with an outputSchema', () => {
  let server: FakeOpenAIServer;
  beforeAll(async () => {
    server = await startFakeOpenAIServer();
  });
  afterAll(() => server.close());
  beforeEach(() => server.reset());
  const adapter = (extra: { structuredOutput?: boolean } = {}) => createOpenAIAdapter({ apiKey: 'sk-test', baseURL: server.baseURL, ...extra });

  it('sends response_format json_schema (strict for a closed schema) beside the tools, and streams the JSON as text', async () => {
    server.enqueue(openAIText(['{"files": 2, ', '"names": ["a", "b"]}']));
    const chunks = await collect(adapter().generate(request(closed), { signal: signal() }));
    expect(JSON.parse(textOf(chunks))).toEqual({ files: 2, names: ['a', 'b'] });
    const body = server.requests[0]!.body;
    expect(body.response_format).toEqual({ type: 'json_schema', json_schema: { name: 'output', schema: closed, strict: true } });
    expect(body.tools).toHaveLength(1);
  });

  it('sends strict false for a schema outside strict mode, which the API would refuse with strict true', async () => {
    server.enqueue(openAIText(['{"files": 2}']));
    await collect(adapter().generate(request(open), { signal: signal() }));
    expect(server.requests[0]!.body.response_format).toEqual({ type: 'json_schema', json_schema: { name: 'output', schema: open, strict: false } });
  });

  it('is refused by the fake as by the API when strict is claimed for an open schema (the check the adapter avoids)', async () => {
    const response = await fetch(`${server.baseURL}/chat/completions`, {
      method: 'POST',
      headers: { 'content-type': 'application/json' },
      body: JSON.stringify({ model: 'm', messages: [], response_format: { type: 'json_schema', json_schema: { name: 'output', schema: open, strict: true } } }),
    });
    expect(response.status).toBe(400);
  });

  it('carries it on the non-streaming fallback call too', async () => {
    server.enqueue({ kind: 'sse', frames: [], cutAfter: 0 }, { kind: 'json', status: 200, body: completion('{"files": 1, "names": ["x"]}') });
    const chunks = await collect(adapter().generate(request(closed), { signal: signal() }));
    expect(textOf(chunks)).toBe('{"files": 1, "names": ["x"]}');
    expect(server.requests.map((sent) => sent.body.response_format)).toEqual([expect.objectContaining({ type: 'json_schema' }), expect.objectContaining({ type: 'json_schema' })]);
  });

  it('sends no response_format without an outputSchema, or when structuredOutput is off', async () => {
    server.enqueue(openAIText(['plain']), openAIText(['{"files": 1}']));
    await collect(adapter().generate(request(), { signal: signal() }));
    await collect(adapter({ structuredOutput: false }).generate(request(closed), { signal: signal() }));
    expect(server.requests.map((sent) => 'response_format' in sent.body)).toEqual([false, false]);
  });
});

describe('strictCompatible', () => {
  it('holds only when every object, nested ones included, is closed and requires all its properties', () => {
    expect(strictCompatible(closed)).toBe(true);
    expect(strictCompatible(open)).toBe(false);
    const nestedOpen = { ...closed, properties: { ...closed.properties, owner: { type: 'object', properties: { name: { type: 'string' } }, required: ['name'] } }, required: [...closed.required, 'owner'] };
    expect(strictCompatible(nestedOpen)).toBe(false);
  });
});

describe('Anthropic adapter with an outputSchema', () => {
  let server: FakeSseServer;
  beforeAll(async () => {
    server = await startFakeAnthropicServer();
  });
  afterAll(() => server.close());
  beforeEach(() => server.reset());
  const adapter = (extra: { structuredOutput?: boolean } = {}) => createAnthropicAdapter({ apiKey: 'sk-ant-test', baseURL: server.url, ...extra });

  it('sends output_config.format json_schema beside the tools, and streams the JSON as text', async () => {
    server.enqueue(anthropicText(['{"files": 3, ', '"names": []}']));
    const chunks = await collect(adapter().generate(request(closed), { signal: signal() }));
    expect(JSON.parse(textOf(chunks))).toEqual({ files: 3, names: [] });
    const body = server.requests[0]!.body;
    expect(body.output_config).toEqual({ format: { type: 'json_schema', schema: closed } });
    expect(body.tools).toEqual([expect.objectContaining({ name: 'list_dir' })]);
  });

  it('is refused by the fake as by the API when the format is malformed (the adapter never sends one)', async () => {
    const response = await fetch(`${server.url}/v1/messages`, {
      method: 'POST',
      headers: { 'content-type': 'application/json' },
      body: JSON.stringify({ model: 'm', max_tokens: 10, messages: [], output_config: { format: { type: 'json', schema: closed } } }),
    });
    expect(response.status).toBe(400);
  });

  it('sends no output_config without an outputSchema, or when structuredOutput is off', async () => {
    server.enqueue(anthropicText(['plain']), anthropicText(['{}']));
    await collect(adapter().generate(request(), { signal: signal() }));
    await collect(adapter({ structuredOutput: false }).generate(request(closed), { signal: signal() }));
    expect(server.requests.map((sent) => 'output_config' in sent.body)).toEqual([false, false]);
  });
});

describe('JSON action mode with an outputSchema', () => {
  /** An adapter answering each call with the next text, recording what it was asked. */
  function replies(texts: readonly string[]): ProviderAdapter & { requests: AdapterRequest[] } {
    const requests: AdapterRequest[] = [];
    return {
      name: 'ollama',
      requests,
      async *generate(sent) {
        requests.push(sent);
        yield { type: 'text-delta', text: texts[requests.length - 1] ?? '' };
        yield { type: 'done', finishReason: 'stop' };
      },
    };
  }

  it('tells the model that final must match the schema, does not pass the schema to the backend, and sends an object final as its JSON', async () => {
    const inner = replies(['{"action": "finish", "final": {"files": 4, "names": ["a"]}}']);
    const chunks = await collect(withJsonActions(inner).generate(request(closed), { signal: signal() }));
    expect(JSON.parse(textOf(chunks))).toEqual({ files: 4, names: ['a'] });
    expect(inner.requests[0]!.outputSchema).toBeUndefined();
    const instructions = inner.requests[0]!.messages.find((message) => message.role === 'system' && message.content.includes('"action"'));
    expect(instructions?.content).toContain(`"final": <a JSON value matching this JSON Schema: ${JSON.stringify(closed)}>`);
  });

  it('still fails a reply that holds no usable action', async () => {
    const inner = replies(['{"oops": 1}', '{"oops": 2}']);
    await expect(collect(withJsonActions(inner).generate(request(closed), { signal: signal() }))).rejects.toBeInstanceOf(ProviderError);
  });
});
