import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import type { NatsConnection, Subscription } from '@nats-io/nats-core';
import { connect } from '@nats-io/transport-node';
import { msgpackHeaders } from '../../src/bus/request.ts';
import { createProviderClient, providerOfModel } from '../../src/bus/provider-client.ts';
import type { ProviderClient } from '../../src/bus/provider-client.ts';
import { CancelledError, ProviderError, TimeoutError } from '../../src/errors.ts';
import { createLogger } from '../../src/logging.ts';
import { cancelRequestSchema, createCodec, createSubjects } from '../../src/protocol/index.ts';
import type { ChunkBody, GenerateChunk, GenerateRequest } from '../../src/protocol/index.ts';
import type { AdapterRequest, ProviderAdapter } from '../../services/provider/adapter.ts';
import { createProviderHost } from '../../services/provider/host.ts';
import type { ProviderHost } from '../../services/provider/host.ts';
import { createScriptedAdapter } from '../../services/provider/scripted.ts';
import type { Script } from '../../services/provider/script.ts';
import { startNatsServer } from '../helpers/nats-server.ts';
import type { TestNatsServer } from '../helpers/nats-server.ts';

const codec = createCodec();
const subjects = createSubjects('clienttest');
const logger = createLogger({ name: 'provider-client-test', level: 'silent' });

const script: Script = {
  responses: [
    { text: 'Let me look.', toolCalls: [{ name: 'list_dir', args: { path: '.' } }] },
    { text: 'Here is the answer.' },
    { error: { code: 'rate_limited', message: 'scripted 429', retryable: true } },
  ],
};

let server: TestNatsServer;
let nc: NatsConnection;
let host: ProviderHost;
let client: ProviderClient;
/** Signals the slow adapter was given, so a test can see the cancel reach the adapter. */
const slowSignals: AbortSignal[] = [];

const slowAdapter: ProviderAdapter = {
  name: 'slow',
  generate(request: AdapterRequest, { signal }) {
    slowSignals.push(signal);
    return createScriptedAdapter({ script: { responses: [{ text: 'a b c d e f', delayMs: 10_000 }] } }).generate(request, { signal });
  },
};

beforeAll(async () => {
  server = await startNatsServer();
  nc = await connect({ servers: server.url });
  host = createProviderHost({ nc, subjects, codec, logger, adapters: [createScriptedAdapter({ script }), slowAdapter] });
  await host.start();
  client = createProviderClient({ nc, subjects, codec, logger });
});

afterAll(async () => {
  await host?.stop();
  await nc?.close();
  await server?.stop();
});

let counter = 0;
function generateRequest(overrides: Partial<GenerateRequest> = {}): GenerateRequest {
  counter += 1;
  return { v: 1, requestId: `req-${counter}`, model: 'scripted:default', messages: [{ role: 'user', content: 'what is here?' }], tools: [], ...overrides };
}

async function collect(iterable: AsyncIterable<GenerateChunk>): Promise<GenerateChunk[]> {
  const chunks: GenerateChunk[] = [];
  for await (const chunk of iterable) chunks.push(chunk);
  return chunks;
}

function textOf(chunks: readonly GenerateChunk[]): string {
  return chunks.map((chunk) => (chunk.type === 'text-delta' ? chunk.text : '')).join('');
}

/** A subscriber on a provider subject that plays `reply` for each request; records and acks the cancels it hears. */
function fakeProvider(provider: string, reply: (replySubject: string, requestId: string) => void): { cancels: string[]; stop(): void } {
  const cancels: string[] = [];
  const subscriptions: Subscription[] = [
    nc.subscribe(subjects.providerGenerate(provider), {
      callback: (_error, message) => {
        const request = codec.decode(message.data) as { requestId: string };
        if (message.reply) reply(message.reply, request.requestId);
      },
    }),
    nc.subscribe(subjects.providerCancel(provider), {
      callback: (_error, message) => {
        const id = codec.decodeAs(cancelRequestSchema, message.data).id;
        cancels.push(id);
        message.respond(codec.encode({ v: 1, id, cancelled: true }), { headers: msgpackHeaders() });
      },
    }),
  ];
  return { cancels, stop: () => subscriptions.forEach((subscription) => subscription.unsubscribe()) };
}

function send(replySubject: string, requestId: string, seq: number, body: ChunkBody): void {
  nc.publish(replySubject, codec.encode({ ...body, v: 1, requestId, seq }), { headers: msgpackHeaders() });
}

describe('provider client', () => {
  it('names the provider by the part of the model before the colon', () => {
    expect(providerOfModel('openai:gpt-5.4-mini')).toBe('openai');
    expect(providerOfModel('ollama:qwen3:8b')).toBe('ollama');
    expect(() => providerOfModel('gpt-4')).toThrow(/<provider>:<model>/);
  });

  it('streams a scripted answer in order, tool calls included, and ends after done', async () => {
    const chunks = await collect(client.generate(generateRequest({ sessionId: 'tour', tenant: 't' }), { idleTimeoutMs: 2000, timeoutMs: 5000 }));
    // Deltas that arrived together are joined, so seq may skip (it is the provider's last seq of the join).
    const seqs = chunks.map((chunk) => chunk.seq);
    expect(seqs).toEqual([...seqs].sort((a, b) => a - b));
    expect(new Set(seqs).size).toBe(seqs.length);
    expect(textOf(chunks)).toBe('Let me look.');
    expect(chunks.find((chunk) => chunk.type === 'tool-call')).toMatchObject({ name: 'list_dir', args: { path: '.' } });
    expect(chunks.at(-1)).toMatchObject({ type: 'done', finishReason: 'tool_calls' });
  });

  it('advances the script per session, keeps sessions apart, and echoes when the script runs out', async () => {
    const scope = { tenant: 't', sessionId: 'walk' };
    expect(textOf(await collect(client.generate(generateRequest(scope))))).toBe('Let me look.');
    expect(textOf(await collect(client.generate(generateRequest({ tenant: 't', sessionId: 'elsewhere' }))))).toBe('Let me look.');
    expect(textOf(await collect(client.generate(generateRequest(scope))))).toBe('Here is the answer.');
    await expect(collect(client.generate(generateRequest(scope)))).rejects.toThrow('scripted 429');
    const echoed = await collect(client.generate(generateRequest({ ...scope, messages: [{ role: 'user', content: 'echo this' }] })));
    expect(textOf(echoed)).toBe('echo this');
    expect(echoed.some((chunk) => chunk.type === 'tool-call')).toBe(false);
  });

  it('throws a scripted error entry as a ProviderError with its code and retryable flag', async () => {
    const scope = { tenant: 't', sessionId: 'failing' };
    await collect(client.generate(generateRequest(scope)));
    await collect(client.generate(generateRequest(scope)));
    const error = await collect(client.generate(generateRequest(scope))).then(
      () => undefined,
      (caught: unknown) => caught,
    );
    expect(error).toBeInstanceOf(ProviderError);
    expect(error).toMatchObject({ code: 'rate_limited', retryable: true, provider: 'scripted' });
  });

  it('throws invalid_input when the provider refuses a malformed request', async () => {
    const bad = { ...generateRequest(), messages: [{ role: 'robot', content: 'x' }] } as unknown as GenerateRequest;
    await expect(collect(client.generate(bad))).rejects.toMatchObject({ code: 'invalid_input' });
  });

  it('cancels mid-stream: the stream stops at once, the provider is told and its adapter aborted', async () => {
    const controller = new AbortController();
    const request = generateRequest({ model: 'slow:default' });
    const seen: GenerateChunk[] = [];
    const run = async () => {
      for await (const chunk of client.generate(request, { signal: controller.signal })) {
        seen.push(chunk);
        setTimeout(() => controller.abort(new CancelledError('user pressed stop')), 20);
      }
    };
    await expect(run()).rejects.toThrow('user pressed stop');
    expect(seen).toHaveLength(1);
    const signal = slowSignals.at(-1);
    expect(signal?.aborted).toBe(true);
    await expect.poll(() => host.inFlight).toBe(0);
  });

  it('stops within 100 ms of the abort when the provider acknowledges the cancel', async () => {
    const controller = new AbortController();
    const iterator = client.generate(generateRequest({ model: 'slow:default' }), { signal: controller.signal })[Symbol.asyncIterator]();
    await iterator.next();
    const pending = iterator.next();
    const abortedAt = Date.now();
    controller.abort(new CancelledError('stop'));
    await expect(pending).rejects.toBeInstanceOf(CancelledError);
    expect(Date.now() - abortedAt).toBeLessThan(100);
  });

  it('sends nothing when the signal is already aborted', async () => {
    let requests = 0;
    const fake = fakeProvider('counted', () => {
      requests += 1;
    });
    const controller = new AbortController();
    controller.abort(new CancelledError('already gone'));
    await expect(collect(client.generate(generateRequest({ model: 'counted:x' }), { signal: controller.signal }))).rejects.toThrow('already gone');
    await nc.flush();
    expect(requests).toBe(0);
    expect(fake.cancels).toEqual([]);
    fake.stop();
  });

  it('times out on a silent provider and sends it a cancel', async () => {
    const fake = fakeProvider('silent', () => {});
    const request = generateRequest({ model: 'silent:x' });
    await expect(collect(client.generate(request, { idleTimeoutMs: 100, timeoutMs: 5000 }))).rejects.toBeInstanceOf(TimeoutError);
    expect(fake.cancels).toEqual([request.requestId]);
    fake.stop();
  });

  it('gives a clear retryable no_responders error naming the provider when none runs', async () => {
    const error = await collect(client.generate(generateRequest({ model: 'nobody:x' }))).then(
      () => undefined,
      (caught: unknown) => caught,
    );
    expect(error).toBeInstanceOf(ProviderError);
    expect(error).toMatchObject({ code: 'no_responders', retryable: true, provider: 'nobody' });
    expect((error as Error).message).toContain('"nobody"');
  });

  it('throws a retryable stream_interrupted on a gap in seq and cancels the broken stream', async () => {
    const fake = fakeProvider('gappy', (reply, requestId) => {
      send(reply, requestId, 0, { type: 'text-delta', text: 'a' });
      send(reply, requestId, 2, { type: 'text-delta', text: 'c' });
    });
    const request = generateRequest({ model: 'gappy:x' });
    await expect(collect(client.generate(request))).rejects.toMatchObject({ name: 'ProviderError', code: 'stream_interrupted', retryable: true });
    expect(fake.cancels).toEqual([request.requestId]);
    fake.stop();
  });

  it('throws provider_error on a text-delta whose fields are wrong (checked by hand, not by the schema)', async () => {
    for (const bad of [{ text: 5 }, { seq: 0.5 }, { seq: '0' }, { v: 2 }]) {
      const fake = fakeProvider('badtext', (reply, requestId) => {
        nc.publish(reply, codec.encode({ v: 1, requestId, seq: 0, type: 'text-delta', text: 'a', ...bad }), { headers: msgpackHeaders() });
      });
      await expect(collect(client.generate(generateRequest({ model: 'badtext:x' })))).rejects.toMatchObject({ code: 'provider_error' });
      fake.stop();
    }
  });

  it('throws provider_error on a chunk that does not match the schema', async () => {
    const fake = fakeProvider('garbled', (reply, requestId) => {
      nc.publish(reply, codec.encode({ v: 1, requestId, seq: 0, type: 'smoke-signal' }), { headers: msgpackHeaders() });
    });
    await expect(collect(client.generate(generateRequest({ model: 'garbled:x' })))).rejects.toMatchObject({ code: 'provider_error' });
    fake.stop();
  });

  it('sends a cancel when the consumer stops iterating before done', async () => {
    const request = generateRequest({ model: 'slow:default' });
    for await (const chunk of client.generate(request)) {
      expect(chunk.type).toBe('text-delta');
      break;
    }
    expect(slowSignals.at(-1)?.aborted).toBe(true);
    await expect.poll(() => host.inFlight).toBe(0);
  });
});
