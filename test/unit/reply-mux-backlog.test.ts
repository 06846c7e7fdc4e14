import { describe, expect, it } from 'vitest';
import type { Msg, NatsConnection, Subscription } from '@nats-io/nats-core';
import { createReplyMux } from '../../src/bus/reply-mux.ts';
import { request } from '../../src/bus/request.ts';
import { requestToolCall } from '../../src/bus/tool-call-request.ts';
import { streamRequest } from '../../src/bus/stream-reply.ts';
import { createCodec } from '../../src/protocol/index.ts';
import { TimeoutError } from '../../src/errors.ts';

/**
 * A connection with one subscriber, whose test hands it a burst of replies at once, as nats.js does with one socket
 * read: nothing in it waits on I/O, so when a turn of the loop runs what is the same every run.
 */
function fakeConnection() {
  let deliver: ((error: Error | null, message: Msg) => void) | undefined;
  const published: Array<{ subject: string; reply: string }> = [];
  const nc = {
    subscribe(_subject: string, options: { callback: (error: Error | null, message: Msg) => void }) {
      deliver = options.callback;
      return { closed: new Promise(() => {}), isClosed: () => false } as unknown as Subscription;
    },
    publish(subject: string, _payload: Uint8Array, options: { reply: string }) {
      published.push({ subject, reply: options.reply });
    },
  } as unknown as NatsConnection;
  return {
    nc,
    published,
    /** One message on a reply subject, handed to the subscription now. */
    reply(subject: string, headers?: Record<string, string>) {
      const message = {
        subject,
        data: new Uint8Array(),
        headers: { hasError: false, get: (name: string) => headers?.[name] ?? '' },
      } as unknown as Msg;
      deliver!(null, message);
    },
  };
}

/** Holds the event loop (a loaded process): every timer due by now fires in the next turn, before any immediate. */
function holdLoop(ms: number): void {
  const until = Date.now() + ms;
  while (Date.now() < until);
}

const settle = <T>(promise: Promise<T>) => promise.then(() => 'replied' as const, (error: unknown) => (error instanceof TimeoutError ? 'timeout' : error));

describe('reply mux under a backlog', () => {
  it('hands a request its reply that waits in the paced queue when its timer fires, instead of timing it out', async () => {
    const connection = fakeConnection();
    const replies = createReplyMux(connection.nc, { perTurn: 8 });
    const outcomes = Array.from({ length: 100 }, () => settle(request(connection.nc, 'svc', new Uint8Array(), { timeoutMs: 20, replies })));
    // All 100 replies come in one read, on time; the loop is then held past every request's timeout.
    for (const { reply } of connection.published) connection.reply(reply);
    holdLoop(40);
    const results = await Promise.all(outcomes);
    expect(results.filter((result) => result !== 'replied')).toEqual([]);
  });

  it('hands a tool call its reply that waits in the paced queue when its timer fires', async () => {
    const connection = fakeConnection();
    const replies = createReplyMux(connection.nc, { perTurn: 8 });
    const codec = createCodec();
    const outcomes = Array.from({ length: 50 }, () =>
      settle(requestToolCall(connection.nc, 'tool', new Uint8Array(), { replies, codec, headers: {} as never, timeoutMs: 20, lapseMs: 10_000, expectHeartbeats: false })),
    );
    for (const { reply } of connection.published) connection.reply(reply);
    holdLoop(40);
    const results = await Promise.all(outcomes);
    expect(results.filter((result) => result !== 'replied')).toEqual([]);
  });

  it('hands a stream the message that waits in the paced queue when its idle timer fires', async () => {
    const connection = fakeConnection();
    const replies = createReplyMux(connection.nc, { perTurn: 8 });
    const streams = Array.from({ length: 50 }, () => streamRequest(connection.nc, 'gen', new Uint8Array(), () => true, { replies, timeoutMs: 10_000, idleTimeoutMs: 20 }));
    // Each stream sends its request on its first step.
    const firsts = streams.map((stream) => stream.next());
    await new Promise((resolve) => setImmediate(resolve));
    for (const { reply } of connection.published) connection.reply(reply);
    holdLoop(40);
    const results = await Promise.all(firsts.map(settle));
    expect(results.filter((result) => result !== 'replied')).toEqual([]);
  });
});
