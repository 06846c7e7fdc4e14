import { headers as createHeaders } from '@nats-io/nats-core';
import type { MsgHdrs, NatsConnection } from '@nats-io/nats-core';
import type { Logger } from '../logging.ts';
import { ToolCallEventKind, ToolCallHeader } from '../protocol/index.ts';
import type { Codec, ToolCallEvent } from '../protocol/index.ts';
import { msgpackHeaders } from '../bus/request.ts';
import type { ToolProgress } from './define-tool.ts';

/** The calls of a worker whose callers asked for heartbeats, and the messages that keep those callers waiting. */
export interface CallHeartbeats {
  /** Starts beating for a call: the first heartbeat goes out one interval from now (a short call sends none). */
  add(key: string, target: { readonly reply: string; readonly callId: string }): void;
  /** Sends a progress report now, or within 100 ms when one just went out (the newest wins); it counts as a heartbeat. */
  progress(key: string, update: ToolProgress): void;
  /** Stops beating for a call (its reply is going out). */
  remove(key: string): void;
  /** Stops every beat. */
  stop(): void;
  readonly size: number;
}

interface Beating {
  readonly reply: string;
  readonly callId: string;
  lastSent: number;
  lastProgress: number;
  pending?: ToolProgress;
  flush?: ReturnType<typeof setTimeout>;
}

/** Shortest gap between two progress reports of one call. */
const PROGRESS_GAP_MS = 100;

/**
 * Creates the heartbeats of a worker: one timer for all calls (not one per call), ticking at half the interval,
 * sends `{ v: 1, callId, kind: 'heartbeat' }` to each call's reply subject when nothing went there for an
 * interval. Progress reports go out as they come, at most one per 100 ms per call (the newest held back).
 *
 * @example
 * const beats = createCallHeartbeats({ nc, codec, logger, intervalMs: 1000, now: Date.now });
 * beats.add(key, { reply: message.reply, callId });
 * // … when the reply goes out
 * beats.remove(key);
 */
export function createCallHeartbeats(options: { nc: NatsConnection; codec: Codec; logger: Logger; intervalMs: number; now: () => number }): CallHeartbeats {
  const { nc, codec, logger, intervalMs, now } = options;
  const calls = new Map<string, Beating>();
  const eventHeaders = (kind: ToolCallEventKind): MsgHdrs => {
    const extra = createHeaders();
    extra.set(ToolCallHeader.event, kind);
    return msgpackHeaders(extra);
  };
  const headers: Record<ToolCallEventKind, MsgHdrs> = { heartbeat: eventHeaders('heartbeat'), progress: eventHeaders('progress') };
  let timer: ReturnType<typeof setInterval> | undefined;

  function send(call: Beating, event: ToolCallEvent): void {
    try {
      nc.publish(call.reply, codec.encode(event), { headers: headers[event.kind] });
    } catch (err) {
      // A closed connection: the caller will find the call lost, which it is.
      logger.debug({ err, callId: call.callId }, 'could not send a heartbeat');
    }
    call.lastSent = now();
  }

  function sendProgress(call: Beating, update: ToolProgress): void {
    call.pending = undefined;
    if (call.flush) clearTimeout(call.flush);
    call.flush = undefined;
    call.lastProgress = now();
    const event: ToolCallEvent = { v: 1, callId: call.callId, kind: ToolCallEventKind.progress, message: update.message.slice(0, 4096) };
    send(call, {
      ...event,
      ...(Number.isFinite(update.progress) ? { progress: update.progress } : {}),
      ...(Number.isFinite(update.total) ? { total: update.total } : {}),
    });
  }

  function tick(): void {
    const at = now();
    for (const call of calls.values()) {
      if (at - call.lastSent >= intervalMs) send(call, { v: 1, callId: call.callId, kind: ToolCallEventKind.heartbeat });
    }
  }

  function ensureTimer(): void {
    if (timer) return;
    // Half the interval keeps the gap between two heartbeats under 1.5 intervals.
    timer = setInterval(tick, Math.max(PROGRESS_GAP_MS, intervalMs / 2));
    timer.unref?.();
  }

  return {
    add(key, target) {
      const at = now();
      calls.set(key, { reply: target.reply, callId: target.callId, lastSent: at, lastProgress: 0 });
      ensureTimer();
    },
    progress(key, update) {
      const call = calls.get(key);
      if (!call) return;
      const wait = PROGRESS_GAP_MS - (now() - call.lastProgress);
      if (wait <= 0) {
        sendProgress(call, update);
        return;
      }
      call.pending = update;
      call.flush ??= setTimeout(() => {
        if (call.pending && calls.get(key) === call) sendProgress(call, call.pending);
      }, wait);
    },
    remove(key) {
      const call = calls.get(key);
      if (call?.flush) clearTimeout(call.flush);
      calls.delete(key);
      if (calls.size === 0 && timer) {
        clearInterval(timer);
        timer = undefined;
      }
    },
    stop() {
      for (const call of calls.values()) if (call.flush) clearTimeout(call.flush);
      calls.clear();
      if (timer) clearInterval(timer);
      timer = undefined;
    },
    get size() {
      return calls.size;
    },
  };
}
