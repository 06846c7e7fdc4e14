import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import type { ChunkBody } from '../../src/protocol/index.ts';
import { createProviderAdapters } from '../../services/provider/adapters/index.ts';
import { resolveProviderConfig } from '../../services/provider/config.ts';
import { errorReply, startFakeOpenAIServer, textStream } from '../helpers/fake-openai-server.ts';
import type { FakeOpenAIServer } from '../helpers/fake-openai-server.ts';

let server: FakeOpenAIServer;
beforeAll(async () => {
  server = await startFakeOpenAIServer();
});
afterAll(async () => {
  await server.close();
});

async function collect(iterable: AsyncIterable<ChunkBody>): Promise<ChunkBody[]> {
  const chunks: ChunkBody[] = [];
  for await (const item of iterable) chunks.push(item);
  return chunks;
}

describe('createProviderAdapters', () => {
  it('composes JSON actions, retries and cost for a configured OpenAI-compatible server', async () => {
    const config = resolveProviderConfig(
      {
        providers: { local: { type: 'openai', baseURL: server.baseURL, jsonActions: ['tiny*'] } },
        pricing: { 'local:*': { input: 1, output: 2 } },
        retry: { maxAttempts: 2 },
      },
      {},
    );
    const [adapter] = createProviderAdapters(config, { sleep: async () => {}, random: () => 0 });
    expect(adapter?.name).toBe('local');
    server.enqueue(
      errorReply(503, 'busy', 'server_error'),
      textStream(['{"action": "tool", "tool_name": "read_file", ', '"args": {"path": "a.txt"}}'], [1000, 500]),
    );
    const chunks = await collect(
      adapter!.generate(
        {
          requestId: 'r1',
          model: 'tiny-llama',
          messages: [{ role: 'user', content: 'Read a.txt' }],
          tools: [{ name: 'read_file', description: 'Reads a file.', parameters: { type: 'object' } }],
        },
        { signal: new AbortController().signal },
      ),
    );
    expect(chunks.map((chunk) => chunk.type)).toEqual(['retry', 'tool-call', 'usage', 'done']);
    expect(chunks[1]).toMatchObject({ type: 'tool-call', name: 'read_file', args: { path: 'a.txt' } });
    expect(chunks[3]).toEqual({ type: 'done', finishReason: 'tool_calls', model: 'local:tiny-llama', cost: (1000 * 1 + 500 * 2) / 1e6 });
    // JSON action mode sends no native tools and carries the instructions in a system message.
    const body = server.requests.at(-1)!.body;
    expect(body).not.toHaveProperty('tools');
    expect(JSON.stringify(body.messages)).toContain('tool_name');
  });
});
