import { DeliverPolicy, jetstream } from '@nats-io/jetstream';
import type { Consumer, ConsumerMessages } from '@nats-io/jetstream';
import type { NatsConnection } from '@nats-io/nats-core';
import { AgentbusError, InvalidInputError } from '../errors.ts';
import { decodeSessionEvent, streamNames } from '../protocol/index.ts';
import type { AgentEvent, Codec, Subjects } from '../protocol/index.ts';
import { createEventQueue } from './event-queue.ts';
import type { SkippedMessage, StreamedEvent } from './streamed-event.ts';

/** Where to start watching; without it, only what comes next. */
export interface WatchFrom {
  /** Resume the log after this stream sequence (0: from the session's first event). */
  readonly log?: number;
  /** Resume live events after this stream sequence (they are kept 5 minutes). */
  readonly live?: number;
}

/** Options of {@link openWatch}. */
export interface WatchOptions {
  /** Ends the watch: the iterator throws the signal's reason. */
  readonly signal?: AbortSignal;
  /** Where to start; without it, only what comes next. */
  readonly from?: WatchFrom;
  /**
   * Hears each skipped message, in order with the events of its stream, from the iterator (a throw ends the
   * iteration with that error). Without it skipped messages pass unheard.
   */
  readonly onInvalid?: (skipped: SkippedMessage) => void;
}

/** An open watch: iterate it for events; `close()` stops it. */
export interface EventWatch extends AsyncIterable<StreamedEvent> {
  close(): Promise<void>;
  /**
   * True when the watch has handed out everything both streams held for it when asked. The log and
   * live streams are not ordered with each other: after `turn.ended` arrives from the log, the turn's
   * last deltas may still be on their way from the live stream.
   */
  drained(): Promise<boolean>;
}

/**
 * Opens a watch on a session's (or, with `sessionId: '*'`, a tenant's) log and live events through
 * JetStream ordered consumers. Resolves once both consumers exist, so whatever happens after that is
 * seen. The consumers survive reconnects by themselves and resume at the last sequence they delivered,
 * so a dropped connection loses no delta; `from` resumes a client that restarted. Events of each stream
 * arrive in order; between the two streams, in arrival order. Each message is decoded and validated
 * (`decodeSessionEvent`): one that is not a valid event of the session it was published for is skipped,
 * and told to `onInvalid`.
 */
export async function openWatch(
  deps: { nc: NatsConnection; subjects: Subjects; codec: Codec },
  target: { tenant: string; sessionId: string },
  options: WatchOptions = {},
): Promise<EventWatch> {
  const { nc, subjects, codec } = deps;
  options.signal?.throwIfAborted();
  const js = jetstream(nc);
  const names = streamNames(subjects.prefix);
  const base = `${subjects.prefix}.${target.tenant}.sessions.${target.sessionId}`;
  const consume = async (stream: string, filter: string, after: number | undefined): Promise<{ consumer: Consumer; messages: ConsumerMessages }> => {
    const consumer = await js.consumers.get(stream, {
      filter_subjects: filter,
      ...(after === undefined ? { deliver_policy: DeliverPolicy.New } : { deliver_policy: DeliverPolicy.StartSequence, opt_start_seq: after + 1 }),
    });
    return { consumer, messages: await consumer.consume() };
  };
  const sources: Array<{ stream: 'log' | 'live'; consumer: Consumer; messages: ConsumerMessages }> = [
    { stream: 'log', ...(await consume(names.log, `${base}.log`, options.from?.log)) },
    { stream: 'live', ...(await consume(names.live, `${base}.live.>`, options.from?.live)) },
  ];

  const queue = createEventQueue({
    sources: sources.length,
    stop: async () => void (await Promise.all(sources.map((source) => source.messages.close().catch(() => undefined)))),
    ...(options.signal ? { signal: options.signal } : {}),
    ...(options.onInvalid ? { onInvalid: options.onInvalid } : {}),
  });
  for (const source of sources) {
    void (async () => {
      let failure: unknown;
      try {
        for await (const message of source.messages) {
          let event: AgentEvent;
          try {
            event = decodeSessionEvent(codec, subjects, message);
          } catch (cause) {
            const error = cause instanceof AgentbusError ? cause : new InvalidInputError(String(cause), { cause });
            queue.push({ skipped: { stream: source.stream, streamSeq: message.seq, subject: message.subject, error } });
            continue;
          }
          queue.push({ event: source.stream === 'log' ? { ...event, seq: message.seq } : event, stream: source.stream, streamSeq: message.seq });
        }
      } catch (error) {
        failure = error;
      } finally {
        queue.sourceEnded(failure);
      }
    })();
  }
  async function drained(): Promise<boolean> {
    if (queue.size() > 0) return false;
    const pending = await Promise.all(sources.map((source) => source.consumer.info(false).then((info) => info.num_pending, () => 0)));
    return queue.size() === 0 && pending.every((count) => count === 0);
  }

  return { [Symbol.asyncIterator]: () => queue.iterate(), close: () => queue.close(), drained };
}
