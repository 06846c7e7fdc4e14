import { Worker } from 'node:worker_threads';
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

/** Holds the event loop for `ms`, as a loaded process does. */
function holdEventLoop(ms: number): void {
  const until = performance.now() + ms;
  while (performance.now() < until) {
    // busy
  }
}

describe('request, reply and a held event loop', () => {
  it('takes a reply that came while the event loop was held past the timeout', async () => {
    // The responder runs in a thread of its own with its own connection, so it answers while this thread is held.
    const responder = new Worker(
      `const { connect } = require('@nats-io/transport-node');
       const { parentPort, workerData } = require('node:worker_threads');
       connect({ servers: workerData }).then(async (nc) => {
         nc.subscribe('held.echo', { callback: (_error, message) => message.respond(message.data) });
         await nc.flush();
         parentPort.postMessage('ready');
       });`,
      { eval: true, workerData: nats.server.url },
    );
    try {
      await new Promise((resolve) => responder.once('message', resolve));
      const asked = request(nats.nc, 'held.echo', new TextEncoder().encode('hi'), { timeoutMs: 100, replies: createReplyMux(nats.nc) });
      // The request is on the server (and so with the responder) before this thread is held past its timeout.
      await nats.nc.flush();
      holdEventLoop(1_000);
      expect(new TextDecoder().decode((await asked).data)).toBe('hi');
    } finally {
      await responder.terminate();
    }
  });

  it('still times out when no reply came', async () => {
    const sub = nats.nc.subscribe('held.silent', { callback: () => {} });
    const asked = request(nats.nc, 'held.silent', new Uint8Array(), { timeoutMs: 50, replies: createReplyMux(nats.nc) });
    holdEventLoop(200);
    await expect(asked).rejects.toBeInstanceOf(TimeoutError);
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
