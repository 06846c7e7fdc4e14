import type { NatsConnection } from '@nats-io/nats-core';
import { ErrorCode, NoRespondersError, TimeoutError, abortReason, toErrorData } from '../errors.ts';
import type { ErrorData } from '../errors.ts';
import type { Logger } from '../logging.ts';
import { contentTypeOf, HookPhase, decodeHookReply } from '../protocol/index.ts';
import type { AfterHookReply, AfterHookRequest, BeforeHookReply, BeforeHookRequest, Codec, HookReply, Subjects } from '../protocol/index.ts';
import { request } from './request.ts';
import { createReplyMux } from './reply-mux.ts';
import type { ReplyMux } from './reply-mux.ts';

/** Options of {@link createHookClient}. */
export interface HookClientOptions {
  readonly nc: NatsConnection;
  readonly subjects: Subjects;
  readonly codec: Codec;
  readonly logger: Logger;
  /** Reply subjects for hook requests; by default the client makes its own mux on `nc` (subscribed on first use). */
  readonly replies?: ReplyMux;
}

/** How one hook request is made: its wait, and the signal that stops it. */
export interface HookCallOptions {
  readonly signal: AbortSignal;
  readonly timeoutMs: number;
}

/**
 * The runtime's side of tool hooks: one request to one hook. Never throws for hook-level failures: no hook
 * process answering (`no_responders`), no answer in time (`timeout`), an undecodable or malformed reply
 * (`invalid_input`) and the hook's own `{ error }` all come back as `{ ok: false, error }`. On abort it rejects
 * with the signal's reason (hooks have no cancel message: a late reply is dropped).
 */
export interface HookClient {
  before(hook: string, body: BeforeHookRequest, options: HookCallOptions): Promise<HookReply<BeforeHookReply>>;
  after(hook: string, body: AfterHookRequest, options: HookCallOptions): Promise<HookReply<AfterHookReply>>;
}

/**
 * Creates the hook client of the runtime.
 *
 * @example
 * const hooks = createHookClient({ nc, subjects, codec, logger });
 * const decided = await hooks.before('policy', request, { signal, timeoutMs: 2000 });
 * if (decided.ok && decided.reply.action === 'block') …
 */
export function createHookClient(options: HookClientOptions): HookClient {
  const { nc, subjects, codec } = options;
  const logger = options.logger.child({ component: 'hook-client' });
  let replies = options.replies;

  /** Sends one request; resolves with the reply message, or the failure as data. */
  async function send(hook: string, phase: HookPhase, body: BeforeHookRequest | AfterHookRequest, callOptions: HookCallOptions): Promise<Sent> {
    const { signal, timeoutMs } = callOptions;
    signal.throwIfAborted();
    let subject: string;
    try {
      subject = subjects.toolHook(hook, phase);
    } catch (error) {
      return failed(toErrorData(error));
    }
    try {
      const message = await request(nc, subject, codec.encode(body), { timeoutMs, signal, replies: (replies ??= createReplyMux(nc)) });
      return { ok: true, data: message.data, contentType: contentTypeOf(message) };
    } catch (error) {
      if (signal.aborted) throw abortReason(signal);
      if (error instanceof NoRespondersError) return failed({ code: ErrorCode.noResponders, message: `no hook process answers on ${subject}`, retryable: true });
      if (error instanceof TimeoutError) return failed({ code: ErrorCode.timeout, message: `no answer on ${subject} within ${timeoutMs} ms`, retryable: true });
      logger.warn({ err: error, hook, phase, callId: body.callId }, 'hook request failed');
      return failed(toErrorData(error));
    }
  }

  /** Decodes a reply with `decode`; a reply that does not decode or validate is a failure of the hook. */
  function read<R>(hook: string, phase: HookPhase, callId: string, sent: Sent, decode: (data: Uint8Array, contentType?: string) => HookReply<R>): HookReply<R> {
    if (!sent.ok) return sent;
    try {
      return decode(sent.data, sent.contentType);
    } catch (error) {
      const { message } = toErrorData(error);
      logger.warn({ hook, phase, callId, reason: message }, 'malformed hook reply');
      return failed({ code: ErrorCode.invalidInput, message: `malformed reply: ${message}`, retryable: false });
    }
  }

  return {
    async before(hook, body, callOptions) {
      const sent = await send(hook, HookPhase.before, body, callOptions);
      return read(hook, HookPhase.before, body.callId, sent, (data, contentType) => decodeHookReply(codec, HookPhase.before, data, contentType));
    },
    async after(hook, body, callOptions) {
      const sent = await send(hook, HookPhase.after, body, callOptions);
      return read(hook, HookPhase.after, body.callId, sent, (data, contentType) => decodeHookReply(codec, HookPhase.after, data, contentType));
    },
  };
}

type Sent = { readonly ok: true; readonly data: Uint8Array; readonly contentType: string | undefined } | { readonly ok: false; readonly error: ErrorData };

function failed(error: ErrorData): { ok: false; error: ErrorData } {
  return { ok: false, error };
}
