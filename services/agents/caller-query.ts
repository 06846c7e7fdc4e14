import { randomUUID } from 'node:crypto';
import { nuid } from '@nats-io/nats-core';
import type { NatsConnection } from '@nats-io/nats-core';
import type { Logger } from '../../src/logging.ts';
import type { Codec } from '../../src/protocol/index.ts';
import { decodePromptRequest } from './request-envelope.ts';
import type { ResponseStream } from './response-stream.ts';
import { QUERY_REPLY_PREFIX } from './wire.ts';

/** One question to the caller of a response stream. */
export interface CallerQuery {
  readonly nc: NatsConnection;
  readonly codec: Codec;
  readonly stream: ResponseStream;
  readonly question: string;
  readonly signal: AbortSignal;
  readonly timeoutMs: number;
  /** The largest reply read (the `prompt` endpoint's max_payload). */
  readonly maxPayloadBytes: number;
  readonly logger: Logger;
}

/**
 * Asks the caller of a response stream a question (§7): subscribes a fresh reply subject under
 * {@link QUERY_REPLY_PREFIX} for one message, sends the `query` chunk naming it, and resolves with the reply's text
 * (plain text, or the `prompt` of an envelope; §7.2). Undefined when no reply comes within `timeoutMs`, the signal
 * aborts, the stream is closed, or the reply cannot be read. Never rejects.
 */
export async function askCaller(query: CallerQuery): Promise<string | undefined> {
  const { nc, signal } = query;
  if (signal.aborted || nc.isClosed()) return undefined;
  const replySubject = `${QUERY_REPLY_PREFIX}.${nuid.next()}`;
  const subscription = nc.subscribe(replySubject, { max: 1 });
  let timer: ReturnType<typeof setTimeout> | undefined;
  const stop = () => subscription.unsubscribe();
  try {
    await nc.flush();
    if (!query.stream.query(randomUUID(), replySubject, query.question)) return undefined;
    timer = setTimeout(stop, query.timeoutMs);
    signal.addEventListener('abort', stop, { once: true });
    for await (const message of subscription) {
      try {
        return decodePromptRequest(query.codec, message.data, { maxPayloadBytes: query.maxPayloadBytes, attachmentsOk: true }).prompt;
      } catch (error) {
        query.logger.info({ err: error, replySubject }, 'a reply to a query could not be read; taken as no answer');
        return undefined;
      }
    }
    return undefined;
  } catch (error) {
    query.logger.warn({ err: error, replySubject }, 'a query to the caller failed');
    return undefined;
  } finally {
    clearTimeout(timer);
    signal.removeEventListener('abort', stop);
    subscription.unsubscribe();
  }
}
