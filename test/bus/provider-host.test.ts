import { describe, expect, it } from 'vitest';
import type { Msg } from '@nats-io/nats-core';
import { createInbox } from '@nats-io/nats-core';
import { createReplyMux } from '../../src/bus/reply-mux.ts';
import { msgpackHeaders, request as busRequest } from '../../src/bus/request.ts';
import { ProviderError } from '../../src/errors.ts';
import { createLogger } from '../../src/logging.ts';
import { createCodec, createSubjects, generateChunkSchema } from '../../src/protocol/index.ts';
import type { CancelAck, ChunkBody, GenerateChunk, GenerateRequest } from '../../src/protocol/index.ts';
import type { AdapterRequest, ProviderAdapter } from '../../services/provider/adapter.ts';
import { createProviderHost } from '../../services/provider/host.ts';
import type { ProviderHost } from '../../services/provider/host.ts';
import { createScriptedAdapter } from '../../services/provider/scripted.ts';
import { useNatsServer } from '../helpers/nats-fixture.ts';

const codec = createCodec();
const subjects = createSubjects('hosttest');
const logLines: string[] = [];
const logger = createLogger({ name: 'provider-host-test', level: 'debug', destination: { write: (line: string) => void logLines.push(line) } });

const nats = useNatsServer();

/** An adapter whose behaviour each test writes, recording what it was asked and its signal. */
function fakeAdapter(name: string, play: (request: AdapterRequest, signal: AbortSignal) => AsyncIterable<ChunkBody>) {
  const calls: { request: AdapterRequest; signal: AbortSignal }[] = [];
  const adapter: ProviderAdapter = {
    name,
    generate(request, { signal }) {
      calls.push({ request, signal });
      return play(request, signal);
    },
  };
  return { adapter, calls };
}

/** Yields one chunk, then waits until aborted, like a stalled upstream that honours its signal. */
async function* oneThenHang(_request: AdapterRequest, signal: AbortSignal): AsyncGenerator<ChunkBody> {
  yield { type: 'text-delta', text: 'partial' };
  await new Promise<void>((resolve) => signal.addEventListener('abort', () => resolve(), { once: true }));
  throw signal.reason;
}

function generateRequest(overrides: Partial<GenerateRequest> = {}): GenerateRequest {
  return { v: 1, requestId: `req-${Math.random().toString(36).slice(2)}`, model: 'scripted:default', messages: [{ role: 'user', content: 'hi' }], tools: [], ...overrides };
}

/** Sends a generate request by hand and collects the raw replies until a terminal chunk or the timeout. */
async function rawGenerate(
  provider: string,
  payload: Uint8Array,
  options: { timeoutMs?: number; onChunk?: (chunk: GenerateChunk) => void } = {},
): Promise<{ chunks: GenerateChunk[]; messages: Msg[] }> {
  const inbox = createInbox();
  const chunks: GenerateChunk[] = [];
  const messages: Msg[] = [];
  const subscription = nats.nc.subscribe(inbox);
  nats.nc.publish(subjects.providerGenerate(provider), payload, { reply: inbox, headers: msgpackHeaders() });
  const timer = setTimeout(() => subscription.unsubscribe(), options.timeoutMs ?? 2000);
  for await (const message of subscription) {
    messages.push(message);
    const chunk = codec.decodeAs(generateChunkSchema, message.data, message.headers?.get('Content-Type'));
    chunks.push(chunk);
    options.onChunk?.(chunk);
    if (chunk.type === 'done' || chunk.type === 'error') break;
  }
  clearTimeout(timer);
  subscription.unsubscribe();
  return { chunks, messages };
}

async function withHost<T>(adapters: ProviderAdapter[], body: (host: ProviderHost) => Promise<T>, requestTimeoutMs?: number): Promise<T> {
  const host = createProviderHost({ nc: nats.nc, subjects, codec, logger, adapters, ...(requestTimeoutMs === undefined ? {} : { requestTimeoutMs }) });
  await host.start();
  try {
    return await body(host);
  } finally {
    await host.stop();
  }
}

describe('provider host', () => {
  it('streams msgpack chunks with seq 0..n and the requestId, ending with one done', async () => {
    const adapter = createScriptedAdapter({ script: { responses: [{ text: 'one two three' }] } });
    await withHost([adapter], async () => {
      const request = generateRequest();
      const { chunks, messages } = await rawGenerate('scripted', codec.encode(request));
      expect(chunks.map((chunk) => chunk.seq)).toEqual(chunks.map((_, index) => index));
      expect(chunks.map((chunk) => chunk.type)).toEqual(['text-delta', 'text-delta', 'text-delta', 'usage', 'done']);
      expect(chunks.every((chunk) => chunk.v === 1 && chunk.requestId === request.requestId)).toBe(true);
      expect(messages.every((message) => message.headers?.get('Content-Type') === 'application/msgpack')).toBe(true);
    });
  });

  it('hands the adapter the model without its provider prefix and the session scope', async () => {
    const { adapter, calls } = fakeAdapter('fake', async function* () {
      yield { type: 'done', finishReason: 'stop' };
    });
    await withHost([adapter], async () => {
      await rawGenerate('fake', codec.encode(generateRequest({ model: 'fake:big:v2', tenant: 't1', sessionId: 's1', maxTokens: 50 })));
      expect(calls[0]?.request).toMatchObject({ model: 'big:v2', tenant: 't1', sessionId: 's1', maxTokens: 50 });
    });
  });

  it('answers a malformed request with one invalid_input error chunk', async () => {
    const { adapter, calls } = fakeAdapter('fake', async function* () {
      yield { type: 'done', finishReason: 'stop' };
    });
    await withHost([adapter], async () => {
      const bad = await rawGenerate('fake', codec.encode({ v: 1, requestId: 'bad-1', model: 'fake:x', messages: 'nope', tools: [] }));
      expect(bad.chunks).toEqual([expect.objectContaining({ type: 'error', seq: 0, requestId: 'bad-1', error: expect.objectContaining({ code: 'invalid_input' }) })]);
      const garbage = await rawGenerate('fake', new Uint8Array([0xc1, 0xff, 0x00]));
      expect(garbage.chunks).toEqual([expect.objectContaining({ type: 'error', seq: 0, error: expect.objectContaining({ code: 'invalid_input' }) })]);
      const wrongProvider = await rawGenerate('fake', codec.encode(generateRequest({ model: 'openai:gpt' })));
      expect(wrongProvider.chunks[0]).toMatchObject({ type: 'error', error: { code: 'invalid_input' } });
      expect(calls).toHaveLength(0);
    });
  });

  it('logs and drops a request without a reply subject', async () => {
    const { adapter, calls } = fakeAdapter('fake', async function* () {
      yield { type: 'done', finishReason: 'stop' };
    });
    await withHost([adapter], async () => {
      nats.nc.publish(subjects.providerGenerate('fake'), codec.encode(generateRequest()));
      await nats.nc.flush();
      await new Promise((resolve) => setTimeout(resolve, 50));
      expect(calls).toHaveLength(0);
      expect(logLines.some((line) => line.includes('without a reply subject'))).toBe(true);
    });
  });

  it('turns a thrown ProviderError into a terminal error chunk with its code and retryable flag', async () => {
    const { adapter } = fakeAdapter('fake', async function* () {
      yield { type: 'text-delta', text: 'so far' };
      throw new ProviderError('rate_limited', 'upstream said 429', { retryable: true, status: 429 });
    });
    await withHost([adapter], async () => {
      const { chunks } = await rawGenerate('fake', codec.encode(generateRequest({ model: 'fake:x' })));
      expect(chunks.map((chunk) => chunk.type)).toEqual(['text-delta', 'error']);
      expect(chunks[1]).toMatchObject({ seq: 1, error: { code: 'rate_limited', message: 'upstream said 429', retryable: true } });
    });
  });

  it('scrubs the message of the error chunk a failure ends in, whatever adapter threw it', async () => {
    const token = 'xoxb-123456789012-1234567890123-aB3dE6gH9jK2mN5pQ8sT1vW4';
    const { adapter } = fakeAdapter('fake', async function* () {
      yield { type: 'text-delta', text: 'so far' };
      throw new Error(`webhook refused ${token}`);
    });
    await withHost([adapter], async () => {
      const { chunks } = await rawGenerate('fake', codec.encode(generateRequest({ model: 'fake:x' })));
      expect(chunks[1]).toMatchObject({ type: 'error', error: { code: 'internal', message: 'webhook refused [REDACTED:slack]' } });
    });
    expect(logLines.join('\n')).not.toContain(token);
  });

  it('ends the stream with done when an adapter forgets to', async () => {
    const { adapter } = fakeAdapter('fake', async function* () {
      yield { type: 'text-delta', text: 'hi' };
    });
    await withHost([adapter], async () => {
      const { chunks } = await rawGenerate('fake', codec.encode(generateRequest({ model: 'fake:x' })));
      expect(chunks.map((chunk) => chunk.type)).toEqual(['text-delta', 'done']);
    });
  });

  it('cancels a running request: aborts the adapter, ends with a cancelled chunk and acks the cancel', async () => {
    const { adapter, calls } = fakeAdapter('fake', oneThenHang);
    await withHost([adapter], async (host) => {
      const request = generateRequest({ model: 'fake:x' });
      let cancelled: Promise<Msg> | undefined;
      const result = rawGenerate('fake', codec.encode(request), {
        onChunk: (chunk) => {
          if (chunk.seq === 0) cancelled = busRequest(nats.nc, subjects.providerCancel('fake'), codec.encode({ v: 1, id: request.requestId }), { timeoutMs: 1000, replies: createReplyMux(nats.nc) });
        },
      });
      const { chunks } = await result;
      expect(chunks.map((chunk) => chunk.type)).toEqual(['text-delta', 'error']);
      expect(chunks[1]).toMatchObject({ seq: 1, error: { code: 'cancelled' } });
      const ack = codec.decode((await cancelled!).data) as CancelAck;
      expect(ack).toEqual({ v: 1, id: request.requestId, cancelled: true });
      expect(calls[0]?.signal.aborted).toBe(true);
      await expect.poll(() => host.inFlight).toBe(0);
    });
  });

  it('stays silent on a cancel for a request it does not hold', async () => {
    const { adapter } = fakeAdapter('fake', oneThenHang);
    await withHost([adapter], async () => {
      await expect(busRequest(nats.nc, subjects.providerCancel('fake'), codec.encode({ v: 1, id: 'nobody-has-this' }), { timeoutMs: 200, replies: createReplyMux(nats.nc) })).rejects.toMatchObject({
        code: 'timeout',
      });
    });
  });

  it('ends a request that runs past its timeout with a retryable timeout chunk', async () => {
    const { adapter, calls } = fakeAdapter('fake', oneThenHang);
    await withHost(
      [adapter],
      async () => {
        const { chunks } = await rawGenerate('fake', codec.encode(generateRequest({ model: 'fake:x' })));
        expect(chunks.at(-1)).toMatchObject({ type: 'error', error: { code: 'timeout', retryable: true } });
        expect(calls[0]?.signal.aborted).toBe(true);
      },
      100,
    );
  });

  it('aborts requests in flight on stop and tells the caller to retry elsewhere', async () => {
    const { adapter, calls } = fakeAdapter('fake', oneThenHang);
    const host = createProviderHost({ nc: nats.nc, subjects, codec, logger, adapters: [adapter] });
    await host.start();
    const result = rawGenerate('fake', codec.encode(generateRequest({ model: 'fake:x' })), {
      onChunk: (chunk) => {
        if (chunk.seq === 0) void host.stop();
      },
    });
    const { chunks } = await result;
    expect(chunks.at(-1)).toMatchObject({ type: 'error', error: { code: 'provider_error', retryable: true } });
    expect(calls[0]?.signal.aborted).toBe(true);
    expect(host.inFlight).toBe(0);
  });

  it('serves each request from one instance of a queue group', async () => {
    const first = fakeAdapter('fake', async function* () {
      yield { type: 'done', finishReason: 'stop' };
    });
    const second = fakeAdapter('fake', async function* () {
      yield { type: 'done', finishReason: 'stop' };
    });
    const other = createProviderHost({ nc: nats.nc, subjects, codec, logger, adapters: [second.adapter] });
    await other.start();
    try {
      await withHost([first.adapter], async () => {
        for (let i = 0; i < 20; i++) await rawGenerate('fake', codec.encode(generateRequest({ model: 'fake:x' })));
      });
    } finally {
      await other.stop();
    }
    expect(first.calls.length + second.calls.length).toBe(20);
    expect(first.calls.length).toBeGreaterThan(0);
    expect(second.calls.length).toBeGreaterThan(0);
  });
});
