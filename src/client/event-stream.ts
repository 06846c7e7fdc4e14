import { DeliverPolicy, jetstream } from '@nats-io/jetstream';
import type { Consumer, ConsumerMessages } from '@nats-io/jetstream';
import type { NatsConnection } from '@nats-io/nats-core';
import { abortReason } from '../errors.ts';
import { streamNames } from '../protocol/index.ts';
import type { AgentEvent, Codec, Subjects } from '../protocol/index.ts';

/** Where an event came from, with its stream sequence: keep the last ones to resume after a restart. */
export interface StreamedEvent {
  readonly event: AgentEvent;
  readonly stream: 'log' | 'live';
  readonly streamSeq: number;
}

/** Where to start watching; without it, only what comes next. */
export interface WatchFrom {
  /** Resume the log after this stream sequence (0: from the session's first event). */
  readonly log?: number;
  /** Resume live events after this stream sequence (they are kept 5 minutes). */
  readonly live?: number;
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
 * arrive in order; between the two streams, in arrival order.
 */
export async function openWatch(
  deps: { nc: NatsConnection; subjects: Subjects; codec: Codec },
  target: { tenant: string; sessionId: string },
  options: { signal?: AbortSignal; from?: WatchFrom } = {},
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

  const queue: StreamedEvent[] = [];
  let wake: (() => void) | undefined;
  let failure: unknown;
  let running = sources.length;
  let closed = false;
  for (const source of sources) {
    void (async () => {
      try {
        for await (const message of source.messages) {
          try {
            const event = codec.decode(message.data, message.headers?.get('Content-Type') || undefined) as AgentEvent;
            queue.push({ event: source.stream === 'log' ? { ...event, seq: message.seq } : event, stream: source.stream, streamSeq: message.seq });
          } catch {
            // Not an agentbus event: skip it, as a subscriber of the subject would.
          }
          wake?.();
        }
      } catch (error) {
        failure ??= error;
      } finally {
        running -= 1;
        wake?.();
      }
    })();
  }
  const close = async () => {
    if (closed) return;
    closed = true;
    wake?.();
    await Promise.all(sources.map((source) => source.messages.close().catch(() => undefined)));
  };
  const onAbort = () => wake?.();
  options.signal?.addEventListener('abort', onAbort, { once: true });

  async function* iterate(): AsyncGenerator<StreamedEvent, void, undefined> {
    try {
      while (!closed) {
        if (options.signal?.aborted) throw abortReason(options.signal);
        const next = queue.shift();
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
  async function drained(): Promise<boolean> {
    if (queue.length > 0) return false;
    const pending = await Promise.all(sources.map((source) => source.consumer.info(false).then((info) => info.num_pending, () => 0)));
    return queue.length === 0 && pending.every((count) => count === 0);
  }

  return { [Symbol.asyncIterator]: iterate, close, drained };
}
