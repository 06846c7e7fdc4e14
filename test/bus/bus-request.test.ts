import { describe, expect, it } from 'vitest';
import { createReplyMux } from '../../src/bus/reply-mux.ts';
import { request } from '../../src/bus/request.ts';
import { streamRequest } from '../../src/bus/stream-reply.ts';
import { NoRespondersError, TimeoutError } from '../../src/errors.ts';
import { useNatsServer } from '../helpers/nats-fixture.ts';

const nats = useNatsServer();

describe('request', () => {
  it('rejects with NoRespondersError when nobody listens', async () => {
    await expect(request(nats.nc, 'nobody.here', new Uint8Array(), { timeoutMs: 1000, replies: createReplyMux(nats.nc) })).rejects.toBeInstanceOf(NoRespondersError);
  });

  it('rejects with the abort reason when the signal aborts first', async () => {
    const sub = nats.nc.subscribe('slow.echo', { callback: () => {} });
    const controller = new AbortController();
    setTimeout(() => controller.abort(new Error('stop')), 20);
    await expect(request(nats.nc, 'slow.echo', new Uint8Array(), { timeoutMs: 5000, replies: createReplyMux(nats.nc), signal: controller.signal })).rejects.toThrow('stop');
    sub.unsubscribe();
  });
});

describe('streamRequest', () => {
  it('yields every chunk in order until the last one', async () => {
    const sub = nats.nc.subscribe('stream.three', {
      callback: (_error, message) => {
        for (let i = 0; i < 3; i++) nats.nc.publish(message.reply!, new TextEncoder().encode(String(i)));
      },
    });
    const seen: string[] = [];
    for await (const batch of streamRequest(nats.nc, 'stream.three', new Uint8Array(), (m) => m.string() === '2', {
      idleTimeoutMs: 1000,
      timeoutMs: 2000,
      replies: createReplyMux(nats.nc),
    })) {
      seen.push(...batch.map((message) => message.string()));
    }
    expect(seen).toEqual(['0', '1', '2']);
    sub.unsubscribe();
  });

  it('yields the messages that arrived together as one batch', async () => {
    const sub = nats.nc.subscribe('stream.burst', {
      callback: (_error, message) => {
        // Published in one go, so they reach the client in one read.
        for (let i = 0; i < 5; i++) nats.nc.publish(message.reply!, new TextEncoder().encode(String(i)));
      },
    });
    const batches: string[][] = [];
    for await (const batch of streamRequest(nats.nc, 'stream.burst', new Uint8Array(), (m) => m.string() === '4', { idleTimeoutMs: 1000, timeoutMs: 2000, replies: createReplyMux(nats.nc) })) {
      batches.push(batch.map((message) => message.string()));
    }
    expect(batches.flat()).toEqual(['0', '1', '2', '3', '4']);
    expect(batches.length).toBeLessThan(5);
    sub.unsubscribe();
  });

  it('throws NoRespondersError when nobody serves the subject', async () => {
    const iterate = async () => {
      for await (const _ of streamRequest(nats.nc, 'stream.nobody', new Uint8Array(), () => true, { idleTimeoutMs: 1000, timeoutMs: 2000, replies: createReplyMux(nats.nc) })) {
        // nothing
      }
    };
    await expect(iterate()).rejects.toBeInstanceOf(NoRespondersError);
  });

  it('throws TimeoutError when the stream goes silent', async () => {
    const sub = nats.nc.subscribe('stream.silent', { callback: () => {} });
    const iterate = async () => {
      for await (const _ of streamRequest(nats.nc, 'stream.silent', new Uint8Array(), () => true, { idleTimeoutMs: 100, timeoutMs: 2000, replies: createReplyMux(nats.nc) })) {
        // nothing
      }
    };
    await expect(iterate()).rejects.toBeInstanceOf(TimeoutError);
    sub.unsubscribe();
  });
});
