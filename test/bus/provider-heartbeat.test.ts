import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import type { Msg, NatsConnection } from '@nats-io/nats-core';
import { connect } from '@nats-io/transport-node';
import { msgpackHeaders } from '../../src/bus/request.ts';
import { createProviderClient } from '../../src/bus/provider-client.ts';
import type { ProviderClient } from '../../src/bus/provider-client.ts';
import { TimeoutError } from '../../src/errors.ts';
import { createLogger } from '../../src/logging.ts';
import { PROVIDER_HEARTBEAT_EVENT, ProviderCallHeader, createCodec, createSubjects } from '../../src/protocol/index.ts';
import type { GenerateChunk, GenerateRequest } from '../../src/protocol/index.ts';
import { createProviderHost } from '../../services/provider/host.ts';
import type { ProviderHost } from '../../services/provider/host.ts';
import { createScriptedAdapter } from '../../services/provider/scripted.ts';
import { startNatsServer } from '../helpers/nats-server.ts';
import type { TestNatsServer } from '../helpers/nats-server.ts';

// Heartbeats of a provider call: the host sends them only when asked, and the client takes an instance that
// stops sending them for gone (stream_interrupted, retryable) long before its idle timeout.

const codec = createCodec();
const subjects = createSubjects('beattest');
const logger = createLogger({ name: 'provider-heartbeat-test', level: 'silent' });
let server: TestNatsServer;
let nc: NatsConnection;
let host: ProviderHost;
let client: ProviderClient;
let counter = 0;

const request = (model: string): GenerateRequest => ({ v: 1, requestId: `beat-${++counter}`, sessionId: `session-${counter}`, model, messages: [{ role: 'user', content: 'hi' }], tools: [] });

async function collect(iterable: AsyncIterable<GenerateChunk>): Promise<GenerateChunk[]> {
  const chunks: GenerateChunk[] = [];
  for await (const chunk of iterable) chunks.push(chunk);
  return chunks;
}

function heartbeat(reply: string): void {
  const headers = msgpackHeaders();
  headers.set(ProviderCallHeader.event, PROVIDER_HEARTBEAT_EVENT);
  nc.publish(reply, new Uint8Array(), { headers });
}

beforeAll(async () => {
  server = await startNatsServer();
  nc = await connect({ servers: server.url });
  host = createProviderHost({ nc, subjects, codec, logger, adapters: [createScriptedAdapter({ script: { responses: [{ text: 'slow answer here', delayMs: 700, chunkSize: 5 }] } })] });
  await host.start();
  client = createProviderClient({ nc, subjects, codec, logger });
});

afterAll(async () => {
  await host?.stop();
  await nc?.close();
  await server?.stop();
});

describe('provider heartbeats', () => {
  it('the host sends a heartbeat at once and every second to a caller that asks, none to one that does not', async () => {
    const seen = async (ask: boolean): Promise<Msg[]> => {
      const inbox = `_INBOX.beat.${++counter}`;
      const messages: Msg[] = [];
      const subscription = nc.subscribe(inbox, { callback: (_error, message) => void messages.push(message) });
      const headers = msgpackHeaders();
      if (ask) headers.set(ProviderCallHeader.heartbeat, '1');
      nc.publish(subjects.providerGenerate('scripted'), codec.encode(request('scripted:default')), { reply: inbox, headers });
      await new Promise((resolve) => setTimeout(resolve, 2600));
      subscription.unsubscribe();
      return messages.filter((message) => message.headers?.get(ProviderCallHeader.event) === PROVIDER_HEARTBEAT_EVENT);
    };
    const [asked, notAsked] = await Promise.all([seen(true), seen(false)]);
    // 3 chunks 700 ms apart then done: about 2.1 s of stream, a beat at 0, 1 and 2 s.
    expect(asked.length).toBeGreaterThanOrEqual(2);
    expect(asked.every((message) => message.data.length === 0)).toBe(true);
    expect(notAsked).toHaveLength(0);
  }, 20_000);

  it('the client reads through heartbeats: the chunks are the answer, in order', async () => {
    const chunks = await collect(client.generate(request('scripted:default')));
    expect(chunks.map((chunk) => (chunk.type === 'text-delta' ? chunk.text : '')).join('')).toBe('slow answer here');
    expect(chunks.at(-1)?.type).toBe('done');
  }, 20_000);

  it('ends a call stream_interrupted when its instance stops sending heartbeats, well before the idle timeout', async () => {
    // An instance that takes the call, beats twice, sends one chunk, and dies.
    const subscription = nc.subscribe(subjects.providerGenerate('dying'), {
      callback: (_error, message) => {
        const { requestId } = codec.decode(message.data) as { requestId: string };
        heartbeat(message.reply!);
        nc.publish(message.reply!, codec.encode({ v: 1, requestId, seq: 0, type: 'text-delta', text: 'half' }), { headers: msgpackHeaders() });
        setTimeout(() => heartbeat(message.reply!), 200);
      },
    });
    const began = Date.now();
    const received: GenerateChunk[] = [];
    const error = await (async () => {
      for await (const chunk of client.generate(request('dying:model'), { heartbeatLapseMs: 600, idleTimeoutMs: 30_000 })) received.push(chunk);
    })().catch((caught: unknown) => caught);
    subscription.unsubscribe();
    expect(error).toMatchObject({ code: 'stream_interrupted', retryable: true, provider: 'dying' });
    expect((error as Error).message).toContain('heartbeats');
    expect(received.map((chunk) => chunk.type)).toEqual(['text-delta']);
    expect(Date.now() - began).toBeLessThan(5000);
  }, 20_000);

  it('leaves a provider that sends no heartbeats alone, however long it is silent between chunks', async () => {
    const subscription = nc.subscribe(subjects.providerGenerate('quiet'), {
      callback: (_error, message) => {
        const { requestId } = codec.decode(message.data) as { requestId: string };
        const send = (chunk: object) => nc.publish(message.reply!, codec.encode({ v: 1, requestId, ...chunk }), { headers: msgpackHeaders() });
        send({ seq: 0, type: 'text-delta', text: 'slow ' });
        setTimeout(() => send({ seq: 1, type: 'text-delta', text: 'but fine' }), 900);
        setTimeout(() => send({ seq: 2, type: 'done', finishReason: 'stop' }), 1000);
      },
    });
    const chunks = await collect(client.generate(request('quiet:model'), { heartbeatLapseMs: 300 }));
    subscription.unsubscribe();
    expect(chunks.map((chunk) => (chunk.type === 'text-delta' ? chunk.text : chunk.type))).toEqual(['slow ', 'but fine', 'done']);
  }, 20_000);

  it('still times out a call whose instance beats but sends no chunk for the idle timeout', async () => {
    const timers: ReturnType<typeof setInterval>[] = [];
    const subscription = nc.subscribe(subjects.providerGenerate('stuck'), {
      callback: (_error, message) => {
        heartbeat(message.reply!);
        timers.push(setInterval(() => heartbeat(message.reply!), 100));
      },
    });
    const error = await collect(client.generate(request('stuck:model'), { heartbeatLapseMs: 1000, idleTimeoutMs: 800 })).catch((caught: unknown) => caught);
    for (const timer of timers) clearInterval(timer);
    subscription.unsubscribe();
    expect(error).toBeInstanceOf(TimeoutError);
    expect((error as Error).message).toContain('silent for 800 ms');
  }, 20_000);
});
