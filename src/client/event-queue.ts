import { abortReason } from '../errors.ts';
import type { SkippedMessage, StreamedEvent } from './streamed-event.ts';

/** What a watch's sources hand to its reader: an event, or a message that was skipped as not a valid event. */
export type QueuedEvent = StreamedEvent | { readonly skipped: SkippedMessage };

/** The queue between a watch's sources (consumers or subscriptions) and the one caller iterating it. */
export interface EventQueue {
  push(item: QueuedEvent): void;
  /** One source stopped; with an error, the iteration throws it once what came before it is handed out. */
  sourceEnded(error?: unknown): void;
  /** Items not yet handed out. */
  size(): number;
  /** Hands out the events in order until closed, a source fails, every source ended, or the signal aborts. */
  iterate(): AsyncGenerator<StreamedEvent, void, undefined>;
  /** Stops the sources (once) and wakes the reader. */
  close(): Promise<void>;
}

/**
 * Creates the queue of a watch with `sources` producers. Skipped messages wait in the queue too, so `onInvalid`
 * hears them in order, from the iterating caller. `stop` ends the sources; it runs once, on `close()` or when the
 * iteration ends.
 */
export function createEventQueue(options: {
  readonly sources: number;
  readonly stop: () => Promise<void>;
  readonly signal?: AbortSignal;
  readonly onInvalid?: (skipped: SkippedMessage) => void;
}): EventQueue {
  const queue: QueuedEvent[] = [];
  let wake: (() => void) | undefined;
  let failure: unknown;
  let running = options.sources;
  let closed = false;
  const onAbort = () => wake?.();
  options.signal?.addEventListener('abort', onAbort, { once: true });

  async function close(): Promise<void> {
    if (closed) return;
    closed = true;
    wake?.();
    await options.stop();
  }

  async function* iterate(): AsyncGenerator<StreamedEvent, void, undefined> {
    try {
      while (!closed) {
        if (options.signal?.aborted) throw abortReason(options.signal);
        const next = queue.shift();
        if (next && 'skipped' in next) {
          options.onInvalid?.(next.skipped);
          continue;
        }
        if (next) {
          yield next;
          continue;
        }
        if (failure) throw failure;
        if (running === 0) return;
        await new Promise<void>((resolve) => {
          wake = resolve;
        });
        wake = undefined;
      }
    } finally {
      options.signal?.removeEventListener('abort', onAbort);
      await close();
    }
  }

  return {
    push(item) {
      if ('skipped' in item && !options.onInvalid) return;
      queue.push(item);
      wake?.();
    },
    sourceEnded(error) {
      if (error !== undefined) failure ??= error;
      running -= 1;
      wake?.();
    },
    size: () => queue.length,
    iterate,
    close,
  };
}
