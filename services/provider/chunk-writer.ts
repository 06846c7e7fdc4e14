import type { NatsConnection } from '@nats-io/nats-core';
import { msgpackHeaders } from '../../src/bus/request.ts';
import type { ErrorData } from '../../src/errors.ts';
import type { ChunkBody, Codec, GenerateChunk } from '../../src/protocol/index.ts';

/** Writes the chunks of one provider answer to its reply subject. */
export interface ChunkWriter {
  /**
   * Publishes a chunk with `v`, `requestId` and the next `seq`. A `done` or `error` chunk ends the
   * stream; anything written after that is dropped and `false` is returned.
   */
  write(body: ChunkBody): boolean;
  /** Ends the stream with an `error` chunk, unless it has already ended. */
  fail(error: ErrorData): boolean;
  /** True once the terminal chunk is out. */
  readonly ended: boolean;
  /** The `seq` the next chunk will carry. */
  readonly nextSeq: number;
}

/** True for the chunk types that end a stream. */
export function isTerminalChunk(body: { readonly type: string }): boolean {
  return body.type === 'done' || body.type === 'error';
}

/**
 * Creates the writer of one answer: seq 0, 1, 2, … and exactly one terminal chunk, as msgpack with
 * the `Content-Type: application/msgpack` header.
 */
export function createChunkWriter(options: {
  nc: NatsConnection;
  codec: Codec;
  replySubject: string;
  requestId: string;
}): ChunkWriter {
  let seq = 0;
  let ended = false;
  const headers = msgpackHeaders();

  function write(body: ChunkBody): boolean {
    if (ended) return false;
    const chunk: GenerateChunk = { ...body, v: 1, requestId: options.requestId, seq };
    seq += 1;
    if (isTerminalChunk(body)) ended = true;
    options.nc.publish(options.replySubject, options.codec.encode(chunk), { headers });
    return true;
  }

  return {
    write,
    fail: (error) => write({ type: 'error', error: { code: error.code, message: error.message, retryable: error.retryable } }),
    get ended() {
      return ended;
    },
    get nextSeq() {
      return seq;
    },
  };
}
