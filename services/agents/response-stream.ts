import type { MsgHdrs } from '@nats-io/nats-core';
import { ACK_CHUNK, TERMINATOR, errorMessage, queryChunk, responseChunk } from './wire.ts';
import type { AgentFailure } from './wire.ts';

/** Publishes one message to the request's reply subject. */
export type PublishReply = (data: Uint8Array, headers?: MsgHdrs) => void;

/** Timers the keep-alive uses; injected so tests need no clock. */
export interface KeepaliveTimers {
  readonly setInterval: (callback: () => void, ms: number) => unknown;
  readonly clearInterval: (handle: unknown) => void;
}

/** The messages of one response stream, in the order §6 allows and no other. */
export interface ResponseStream {
  /** The leading ack (§6.4); starts the keep-alive. Only the first call sends. */
  ack(): void;
  /** A `response` chunk; empty text is not sent. */
  text(text: string): void;
  /** A `query` chunk (§7): after the ack, before the end; false when the stream is not open to send it. */
  query(id: string, replySubject: string, prompt: string): boolean;
  /** The error message (§9): headers and body; the keep-alive stops first. */
  fail(failure: AgentFailure): void;
  /** The terminator (§6.5), once; nothing is published after it. */
  end(): void;
  readonly ended: boolean;
}

/**
 * One response stream on a reply subject: `ack` first, `response` chunks, an optional error, and always one
 * terminator last, after which it publishes nothing. While it is open after the ack it repeats the ack every
 * `keepaliveMs` (as the reference host does), so that a caller's inactivity timeout (60 s recommended, §6.6) does
 * not fire during a long tool call; 0 turns that off.
 *
 * @example
 * const stream = createResponseStream((data, headers) => message.respond(data, headers ? { headers } : undefined), { keepaliveMs: 30_000 });
 * stream.ack(); stream.text('Hello'); stream.end();
 */
export function createResponseStream(publish: PublishReply, options: { keepaliveMs: number; timers?: KeepaliveTimers }): ResponseStream {
  const timers: KeepaliveTimers = options.timers ?? {
    setInterval: (callback, ms) => setInterval(callback, ms),
    clearInterval: (handle) => clearInterval(handle as ReturnType<typeof setInterval>),
  };
  let acked = false;
  let ended = false;
  let keepalive: unknown;
  const stopKeepalive = () => {
    if (keepalive !== undefined) timers.clearInterval(keepalive);
    keepalive = undefined;
  };
  return {
    ack() {
      if (acked || ended) return;
      acked = true;
      publish(ACK_CHUNK);
      if (options.keepaliveMs > 0) keepalive = timers.setInterval(() => publish(ACK_CHUNK), options.keepaliveMs);
    },
    text(text) {
      if (ended || text === '') return;
      publish(responseChunk(text));
    },
    query(id, replySubject, prompt) {
      if (!acked || ended) return false;
      publish(queryChunk(id, replySubject, prompt));
      return true;
    },
    fail(failure) {
      if (ended) return;
      stopKeepalive();
      const { data, headers } = errorMessage(failure);
      publish(data, headers);
    },
    end() {
      if (ended) return;
      ended = true;
      stopKeepalive();
      publish(TERMINATOR);
    },
    get ended() {
      return ended;
    },
  };
}
