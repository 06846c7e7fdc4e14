import type { Msg, MsgHdrs, NatsConnection } from '@nats-io/nats-core';
import { NoRespondersError, TimeoutError, WorkerLostError, abortReason } from '../errors.ts';
import { contentTypeOf, ToolCallHeader, toolCallEventSchema } from '../protocol/index.ts';
import type { Codec, ToolCallEvent } from '../protocol/index.ts';
import type { Logger } from '../logging.ts';
import { isNoResponders } from './request.ts';
import type { ReplyMux } from './reply-mux.ts';

/** How late a lapse timer may fire before the wait is put down to this process's own stall, not the worker's. */
const LATE_TIMER_MS = 100;
/** How long a lapse that fired late waits again, for the heartbeats the stall kept unread. */
const STALL_GRACE_MS = 250;
/** Stalls forgiven in a row: a process that stalls all the time falls back to the call's timeout anyway. */
const MAX_DEFERRALS = 3;

/** Options of {@link requestToolCall}. */
export interface ToolCallRequestOptions {
  readonly replies: ReplyMux;
  readonly codec: Codec;
  readonly headers: MsgHdrs;
  /** Longest wait for the reply, heartbeats or not. */
  readonly timeoutMs: number;
  /**
   * Longest silence of the worker once the call is sent: past it the call is given up as lost. Counted from the
   * send when `expectHeartbeats`, otherwise from the first heartbeat (a worker that sends none is waited for
   * until `timeoutMs`).
   */
  readonly lapseMs: number;
  readonly expectHeartbeats: boolean;
  readonly signal?: AbortSignal;
  /** Hears each heartbeat and progress report. */
  readonly onEvent?: (event: ToolCallEvent) => void;
  /** Told when `onEvent` throws. */
  readonly logger?: Pick<Logger, 'warn'>;
}

/**
 * Sends one tool call and waits for its reply, taking the heartbeats and progress reports the worker sends to
 * the same reply subject before it (messages with an `Agentbus-Tool-Event` header). Rejects with
 * {@link NoRespondersError}, {@link TimeoutError}, {@link WorkerLostError} when the worker falls silent, or
 * the signal's reason; a late message after that is dropped.
 */
export function requestToolCall(nc: NatsConnection, subject: string, payload: Uint8Array, options: ToolCallRequestOptions): Promise<Msg> {
  return new Promise<Msg>((resolve, reject) => {
    const { signal } = options;
    if (signal?.aborted) {
      reject(abortReason(signal));
      return;
    }
    let lapse: ReturnType<typeof setTimeout> | undefined;
    let heardAt = Date.now();
    let heard = 0;
    let finished = false;
    const finish = () => {
      finished = true;
      route.close();
      clearTimeout(timer);
      clearTimeout(lapse);
      signal?.removeEventListener('abort', onAbort);
    };
    const onAbort = () => {
      finish();
      reject(abortReason(signal!));
    };
    let deferrals = 0;
    const armLapse = (ms = options.lapseMs) => {
      clearTimeout(lapse);
      const due = Date.now() + ms;
      lapse = setTimeout(() => {
        // A heartbeat or the reply may have been read already and wait in the mux's paced queue: taken first.
        const before = heard;
        route.deliverWaiting();
        if (finished || heard !== before) return;
        // A timer that fires late means this process's own event loop was held (a long synchronous task, a GC
        // pause): the heartbeats that came meanwhile may still wait in the socket, read only after timers run.
        // Let the loop read them before the worker is judged, a few times at most.
        if (Date.now() - due > LATE_TIMER_MS && deferrals < MAX_DEFERRALS) {
          deferrals += 1;
          armLapse(Math.min(options.lapseMs, STALL_GRACE_MS));
          return;
        }
        finish();
        const silentMs = Date.now() - heardAt;
        reject(new WorkerLostError(`the worker of ${subject} sent no heartbeat for ${silentMs} ms`, { subject, silentMs }));
      }, ms);
    };
    const route = options.replies.route((message) => {
      const kind = message.headers?.get(ToolCallHeader.event);
      if (kind) {
        heardAt = Date.now();
        heard += 1;
        deferrals = 0;
        armLapse();
        const event = toolCallEventSchema.safeParse(decodeQuietly(options.codec, message));
        // This runs in the connection's shared reply callback: a listener's error must not reach nats.js.
        if (event.success) {
          try {
            options.onEvent?.(event.data);
          } catch (err) {
            options.logger?.warn({ err, subject }, 'a tool call event listener failed');
          }
        }
        return;
      }
      finish();
      if (isNoResponders(message)) reject(new NoRespondersError(subject));
      else resolve(message);
    });
    const timer = setTimeout(() => {
      route.deliverWaiting();
      if (finished) return;
      finish();
      reject(new TimeoutError(`no reply on ${subject} within ${options.timeoutMs} ms`, options.timeoutMs, subject));
    }, options.timeoutMs);
    signal?.addEventListener('abort', onAbort, { once: true });
    if (options.expectHeartbeats) armLapse();
    try {
      nc.publish(subject, payload, { reply: route.subject, headers: options.headers });
    } catch (error) {
      finish();
      reject(error);
    }
  });
}

function decodeQuietly(codec: Codec, message: Msg): unknown {
  try {
    return codec.decode(message.data, contentTypeOf(message));
  } catch {
    // A heartbeat that does not decode still shows the worker is alive; only its content is lost.
    return undefined;
  }
}
