import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { connect } from '@nats-io/transport-node';
import { headers } from '@nats-io/nats-core';
import type { NatsConnection } from '@nats-io/nats-core';
import { createEmbedClient } from '../../src/bus/embed-client.ts';
import { createCodec, createSubjects } from '../../src/protocol/index.ts';
import { resolveProviderConfig, startProviderService } from '../../services/provider/index.ts';
import { PROVIDER_SERVICE_NAME } from '../../services/provider/host.ts';
import type { ProviderService } from '../../services/provider/index.ts';
import { embeddingsReply, errorReply, startFakeOpenAIServer } from '../helpers/fake-openai-server.ts';
import type { FakeOpenAIServer } from '../helpers/fake-openai-server.ts';
import { startNatsServer } from '../helpers/nats-server.ts';
import type { TestNatsServer } from '../helpers/nats-server.ts';
import { silentLogger } from '../helpers/stack.ts';

const codec = createCodec();
const subjects = createSubjects('agentbus');
let nats: TestNatsServer;
let openai: FakeOpenAIServer;
let client: NatsConnection;
let services: NatsConnection;
let provider: ProviderService;

const cosine = (a: readonly number[], b: readonly number[]) => a.reduce((sum, value, index) => sum + value * b[index]!, 0);
const length = (vector: readonly number[]) => Math.sqrt(cosine(vector, vector));

beforeAll(async () => {
  nats = await startNatsServer();
  openai = await startFakeOpenAIServer();
  client = await connect({ servers: nats.url });
  services = await connect({ servers: nats.url });
  const config = resolveProviderConfig({
    providers: {
      openai: { type: 'openai', apiKey: 'sk-test-embed-secret', baseURL: openai.baseURL },
      anthropic: { type: 'anthropic', apiKey: 'sk-ant-test', baseURL: openai.url },
    },
    retry: { maxAttempts: 3, baseDelayMs: 5, maxDelayMs: 20 },
  });
  provider = await startProviderService({ nc: services, logger: silentLogger(), config, script: { responses: [] } });
}, 30_000);

afterAll(async () => {
  await provider?.stop();
  await client?.close();
  await services?.close();
  await openai?.close();
  await nats?.stop();
});

describe('agentbus.provider.<provider>.embed', () => {
  it('embeds through the OpenAI SDK: the documented request, vectors back in input order and normalised', async () => {
    openai.reset();
    // The server may list embeddings in any order; each names its index.
    openai.enqueue(embeddingsReply([[3, 4, 0], [0, 0, 2]], 'text-embedding-3-small', [1, 0]));
    const embedder = createEmbedClient({ nc: client, codec, subjects, provider: 'openai' });
    const { model, dimensions, vectors } = await embedder.embed(['my favourite fruit', 'the harbour'], { timeoutMs: 5_000 });
    expect(model).toBe('text-embedding-3-small');
    expect(dimensions).toBe(3);
    expect(vectors).toEqual([[0.6, 0.8, 0], [0, 0, 1]]);
    const [request] = openai.requests;
    expect(request?.path).toBe('/v1/embeddings');
    expect(request?.headers.authorization).toBe('Bearer sk-test-embed-secret');
    expect(request?.body).toEqual({ model: 'text-embedding-3-small', input: ['my favourite fruit', 'the harbour'], encoding_format: 'float' });
  });

  it('passes a model the request names, without its provider prefix', async () => {
    openai.reset();
    openai.enqueue(embeddingsReply([[1, 0]], 'text-embedding-3-large'));
    const embedder = createEmbedClient({ nc: client, codec, subjects, provider: 'openai' });
    expect((await embedder.embed(['x'], { model: 'openai:text-embedding-3-large' })).model).toBe('text-embedding-3-large');
    expect(openai.requests[0]?.body['model']).toBe('text-embedding-3-large');
    await expect(embedder.embed(['x'], { model: 'ollama:nomic-embed-text' })).rejects.toMatchObject({ code: 'invalid_input' });
  });

  it('retries a 500 and a 429, and gives a 401 back at once as a typed error with no secret in it', async () => {
    openai.reset();
    openai.enqueue(errorReply(500, 'upstream broke', 'server_error'), errorReply(429, 'slow down', 'rate_limit_exceeded', null, { 'retry-after-ms': '10' }), embeddingsReply([[0, 1]]));
    const embedder = createEmbedClient({ nc: client, codec, subjects, provider: 'openai' });
    expect((await embedder.embed(['again'])).vectors).toEqual([[0, 1]]);
    expect(openai.requests).toHaveLength(3);

    openai.reset();
    openai.enqueue(errorReply(401, 'Incorrect API key provided: sk-test-embed-secret', 'invalid_request_error', 'invalid_api_key'));
    const failure = (await embedder.embed(['nope']).then(
      () => undefined,
      (err: unknown) => err,
    )) as { code: string; message: string; retryable: boolean };
    expect(failure).toMatchObject({ retryable: false });
    expect(failure.message).not.toContain('sk-test-embed-secret');
    expect(openai.requests).toHaveLength(1);
  });

  it('answers unsupported for a provider with no embeddings API, naming what to configure', async () => {
    const embedder = createEmbedClient({ nc: client, codec, subjects, provider: 'anthropic' });
    await expect(embedder.embed(['x'])).rejects.toMatchObject({ code: 'unsupported', message: expect.stringContaining('AGENTBUS_EMBED_PROVIDER') });
  });

  it('gives the offline scripted provider a deterministic embedder: same text, same vector; shared words, closer', async () => {
    const embedder = createEmbedClient({ nc: client, codec, subjects, provider: 'scripted' });
    const texts = ['my favourite fruit is the kumquat', 'which fruit do I like? kumquats', 'the boat is moored in the harbour', 'my favourite fruit is the kumquat'];
    const { model, dimensions, vectors } = await embedder.embed(texts);
    expect(model).toBe('scripted-embed');
    expect(dimensions).toBe(256);
    for (const vector of vectors) expect(length(vector)).toBeCloseTo(1, 9);
    expect(vectors[3]).toEqual(vectors[0]);
    expect(cosine(vectors[0]!, vectors[1]!)).toBeGreaterThan(cosine(vectors[0]!, vectors[2]!) + 0.1);
    // More texts than one request takes: split, and still in order.
    const many = Array.from({ length: 300 }, (_, index) => `note number ${index}`);
    const split = await embedder.embed(many);
    expect(split.vectors).toHaveLength(300);
    expect(split.vectors[299]).toEqual((await embedder.embed(['note number 299'])).vectors[0]);
  });

  it('refuses bad requests with typed errors: empty input, wrong types, unknown fields, malformed msgpack and JSON', async () => {
    const ask = async (data: Uint8Array, contentType?: string) => {
      const requestHeaders = headers();
      if (contentType) requestHeaders.set('Content-Type', contentType);
      const reply = await client.request(subjects.providerEmbed('scripted'), data, { timeout: 5_000, headers: requestHeaders });
      return codec.decode(reply.data) as { error?: { code: string } };
    };
    expect((await ask(codec.encode({ v: 1, id: 'a', input: [] }))).error?.code).toBe('invalid_input');
    expect((await ask(codec.encode({ v: 1, id: 'a', input: [5] }))).error?.code).toBe('invalid_input');
    expect((await ask(codec.encode({ v: 1, id: 'a', input: ['x'], extra: true }))).error?.code).toBe('invalid_input');
    expect((await ask(new Uint8Array([0xc1, 0x00]))).error?.code).toBe('invalid_input');
    expect((await ask(new TextEncoder().encode('{"v":1,"id":"j","input":["x"'), 'application/json')).error?.code).toBe('invalid_input');
    expect(await ask(new TextEncoder().encode('{"v":1,"id":"j","input":["from json"]}'), 'application/json')).toMatchObject({ id: 'j', dimensions: 256 });
  });

  it('stops working on a request once its caller stops waiting, as the caller says in Agentbus-Timeout-Ms', async () => {
    openai.reset();
    openai.enqueue({ kind: 'hang' });
    const embedder = createEmbedClient({ nc: client, codec, subjects, provider: 'openai' });
    await expect(embedder.embed(['given up on'], { timeoutMs: 300 })).rejects.toMatchObject({ code: 'timeout' });
    // The provider's own limit is a minute; the request ends at the caller's 300 ms, and its stats say so.
    const lastError = async () => {
      const reply = await client.request(`$SRV.STATS.${PROVIDER_SERVICE_NAME}`, new Uint8Array(), { timeout: 1000 });
      const stats = JSON.parse(new TextDecoder().decode(reply.data)) as { endpoints: Array<{ name: string; last_error: string }> };
      return stats.endpoints.find((endpoint) => endpoint.name === 'openai-embed')?.last_error ?? '';
    };
    await expect.poll(lastError, { timeout: 3_000 }).toMatch(/embed request ran past 300 ms/);
  });

  it('gives up on a provider that does not answer within the timeout, and on abort', async () => {
    openai.reset();
    openai.enqueue({ kind: 'hang' }, { kind: 'hang' });
    const embedder = createEmbedClient({ nc: client, codec, subjects, provider: 'openai' });
    await expect(embedder.embed(['slow'], { timeoutMs: 300 })).rejects.toMatchObject({ code: 'timeout' });
    const controller = new AbortController();
    const pending = embedder.embed(['slow'], { signal: controller.signal, timeoutMs: 10_000 });
    controller.abort(new Error('caller went away'));
    await expect(pending).rejects.toThrow('caller went away');
    await expect(createEmbedClient({ nc: client, codec, subjects, provider: 'nobody' }).embed(['x'], { timeoutMs: 2_000 })).rejects.toMatchObject({ code: 'no_responders' });
  });
});
