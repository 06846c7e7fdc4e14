import { describe, expect, it, vi } from 'vitest';
import type { Msg } from '@nats-io/nats-core';
import { connect } from '@nats-io/transport-node';
import { inboxPrefixOf } from '../../src/bus/inbox.ts';
import { createReplyMux } from '../../src/bus/reply-mux.ts';
import { request } from '../../src/bus/request.ts';
import { streamRequest } from '../../src/bus/stream-reply.ts';
import { NoRespondersError, TimeoutError } from '../../src/errors.ts';
import { useNatsServer } from '../helpers/nats-fixture.ts';

const nats = useNatsServer();
const bytes = (text: string) => new TextEncoder().encode(text);
const text = (message: Msg) => new TextDecoder().decode(message.data);

describe('reply mux', () => {
  it('routes each reply to the route that asked, over one subscription', async () => {
    const { nc } = nats;
    const echo = nc.subscribe('mux.echo', { callback: (_error, message) => void message.respond(bytes(`re:${text(message)}`)) });
    const replies = createReplyMux(nc);
    const subscribe = vi.spyOn(nc, 'subscribe');
    const request_ = vi.spyOn(nc, 'request');
    try {
      const answers = await Promise.all(Array.from({ length: 50 }, (_, i) => request(nc, 'mux.echo', bytes(`q${i}`), { timeoutMs: 2000, replies })));
      expect(answers.map(text)).toEqual(Array.from({ length: 50 }, (_, i) => `re:q${i}`));
      // One subscription for all 50 requests, made on first use; no nats.js request.
      expect(subscribe).toHaveBeenCalledTimes(1);
      expect(request_).not.toHaveBeenCalled();
    } finally {
      subscribe.mockRestore();
      request_.mockRestore();
      echo.unsubscribe();
    }
  });

  it('drops messages for a closed route', async () => {
    const { nc } = nats;
    const replies = createReplyMux(nc);
    const seen: string[] = [];
    const route = replies.route((message) => seen.push(text(message)));
    nc.publish(route.subject, bytes('one'));
    await nc.flush();
    await vi.waitFor(() => expect(seen).toEqual(['one']));
    route.close();
    nc.publish(route.subject, bytes('two'));
    await nc.flush();
    await new Promise((resolve) => setTimeout(resolve, 50));
    expect(seen).toEqual(['one']);
  });

  it('times out, aborts and reports no responders like a plain request', async () => {
    const { nc } = nats;
    const replies = createReplyMux(nc);
    nc.subscribe('mux.silent', { callback: () => undefined });
    await nc.flush();
    await expect(request(nc, 'mux.silent', bytes('x'), { timeoutMs: 100, replies })).rejects.toBeInstanceOf(TimeoutError);
    await expect(request(nc, 'mux.nobody', bytes('x'), { timeoutMs: 1000, replies })).rejects.toBeInstanceOf(NoRespondersError);
    const controller = new AbortController();
    const pending = request(nc, 'mux.silent', bytes('x'), { timeoutMs: 5000, replies, signal: controller.signal });
    controller.abort(new Error('stop'));
    await expect(pending).rejects.toThrow('stop');
    const aborted = AbortSignal.abort(new Error('already'));
    await expect(request(nc, 'mux.silent', bytes('x'), { timeoutMs: 5000, replies, signal: aborted })).rejects.toThrow('already');
  });

  it('carries a streamed reply to its end', async () => {
    const { nc } = nats;
    const replies = createReplyMux(nc);
    nc.subscribe('mux.stream', {
      callback: (_error, message) => {
        for (let i = 0; i < 5; i++) nc.publish(message.reply!, bytes(`part${i}`));
      },
    });
    await nc.flush();
    const parts: string[] = [];
    for await (const batch of streamRequest(nc, 'mux.stream', bytes('go'), (m) => text(m) === 'part4', { idleTimeoutMs: 2000, timeoutMs: 5000, replies })) {
      parts.push(...batch.map(text));
    }
    expect(parts).toEqual(['part0', 'part1', 'part2', 'part3', 'part4']);
  });

  it("makes its reply subjects under the connection's inbox prefix, which is all a sealed user may subscribe to", async () => {
    const { nc, server } = nats;
    expect(createReplyMux(nc).route(() => undefined).subject).toMatch(/^_INBOX\.[A-Za-z0-9]+\.[a-z0-9]+$/);
    const tools = await connect({ servers: server.url, inboxPrefix: '_INBOX_tools' });
    try {
      expect(inboxPrefixOf(tools)).toBe('_INBOX_tools');
      const replies = createReplyMux(tools);
      const seen: string[] = [];
      const echo = nc.subscribe('mux.prefixed', { callback: (_error, message) => void (seen.push(message.reply!), message.respond(bytes('ok'))) });
      await nc.flush();
      const answer = await request(tools, 'mux.prefixed', bytes('?'), { timeoutMs: 2000, replies });
      expect(text(answer)).toBe('ok');
      expect(seen).toHaveLength(1);
      expect(seen[0]).toMatch(/^_INBOX_tools\.[A-Za-z0-9]+\.[a-z0-9]+$/);
      echo.unsubscribe();
    } finally {
      await tools.close();
    }
  });
});
