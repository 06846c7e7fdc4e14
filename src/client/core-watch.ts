import type { Msg, NatsConnection, Subscription } from '@nats-io/nats-core';
import { AgentbusError, ErrorCode, InvalidInputError } from '../errors.ts';
import { decodeSessionEvent } from '../protocol/index.ts';
import type { AgentEvent, Codec, SessionHistoryReply, Subjects } from '../protocol/index.ts';
import { createEventQueue } from './event-queue.ts';
import type { QueuedEvent } from './event-queue.ts';
import type { EventWatch, WatchOptions } from './event-stream.ts';
import { createRecentIds } from './recent-ids.ts';

/** Reads one page of a session's log after a sequence (memory's `history`). */
export type HistoryPage = (sessionId: string, afterSeq: number, signal: AbortSignal | undefined) => Promise<SessionHistoryReply>;

/**
 * Opens a watch with plain subscriptions to a session's (or, with `sessionId: '*'`, a tenant's) `log` and `live.>`
 * subjects, for a connection that has no JetStream: a tenant in an account of its own
 * (`deploy/nats/nats-server.conf`), to which the services' account exports only these subjects. Resolves once the
 * server has the subscriptions, so whatever is published after that is seen. With `from.log`, the session's log
 * after that sequence is read first through `readHistory` (memory's `history`), each event with its `seq`; events
 * that arrive meanwhile follow it, without those it already gave. Events that come by subscription carry no stream
 * sequence (`streamSeq` 0, no `seq`): resume with the last `seq` that history gave, or with `history` itself. Live
 * events are not kept for such a connection: `from.live` is not honoured, and what is published while the
 * connection is down is lost (the log is not: read it back from `history`). One connection delivers the log and
 * the live events in the order the runtime published them. A subscription sees every publish on the log subject,
 * not only what the stream kept: a retried append (the same envelope again) is dropped here by its `id` (the last
 * 1,024 ids are remembered), but an append the stream refused (a conflict, a limit) may still be seen live; `history`
 * holds only what the log kept.
 */
export async function openCoreWatch(
  deps: { nc: NatsConnection; subjects: Subjects; codec: Codec; readHistory: HistoryPage },
  target: { tenant: string; sessionId: string },
  options: WatchOptions = {},
): Promise<EventWatch> {
  const { nc, subjects, codec } = deps;
  options.signal?.throwIfAborted();
  const resumeFrom = options.from?.log;
  if (resumeFrom !== undefined && target.sessionId === '*') {
    throw new InvalidInputError('resuming a whole tenant from the log needs JetStream; without it, resume one session at a time');
  }
  const base = `${subjects.prefix}.${target.tenant}.sessions.${target.sessionId}`;
  // Until the log is read back, what arrives waits here, so that the history comes first.
  let early: QueuedEvent[] | undefined = resumeFrom === undefined ? undefined : [];
  const subscriptions: Subscription[] = [];
  // The session writer republishes an envelope after a conflict; the stream dedupes it, a subscription does not.
  const delivered = createRecentIds();
  const queue = createEventQueue({
    sources: 2,
    stop: async () => {
      for (const subscription of subscriptions) subscription.unsubscribe();
    },
    ...(options.signal ? { signal: options.signal } : {}),
    ...(options.onInvalid ? { onInvalid: options.onInvalid } : {}),
  });
  const receive = (stream: 'log' | 'live') => (error: Error | null, message: Msg) => {
    if (error) return;
    let item: QueuedEvent;
    try {
      const event: AgentEvent = decodeSessionEvent(codec, subjects, message);
      if (stream === 'log' && delivered.repeat(event.id)) return;
      item = { event, stream, streamSeq: 0 };
    } catch (cause) {
      const reason = cause instanceof AgentbusError ? cause : new InvalidInputError(String(cause), { cause });
      item = { skipped: { stream, streamSeq: 0, subject: message.subject, error: reason } };
    }
    if (early) early.push(item);
    else queue.push(item);
  };
  for (const [stream, subject] of [
    ['log', `${base}.log`],
    ['live', `${base}.live.>`],
  ] as const) {
    const subscription = nc.subscribe(subject, { callback: receive(stream) });
    subscriptions.push(subscription);
    void subscription.closed.then((closed) => queue.sourceEnded(closed instanceof Error ? closed : undefined));
  }
  try {
    // The server answers the flush after it took (or refused) both subscriptions; a refusal closes the subscription.
    await nc.flush();
    const refused = subscriptions.find((subscription) => subscription.isClosed());
    if (refused) {
      const reason = await refused.closed;
      throw new AgentbusError(ErrorCode.denied, `this connection may not watch ${base}: ${reason instanceof Error ? reason.message : 'refused'}`, { cause: reason });
    }
    if (resumeFrom !== undefined) {
      const replayed = new Set<string>();
      let afterSeq: number | undefined = resumeFrom;
      while (afterSeq !== undefined) {
        const page = await readPage(deps.readHistory, target.sessionId, afterSeq, options.signal);
        for (const event of page.events) {
          replayed.add(event.id);
          delivered.repeat(event.id);
          queue.push({ event, stream: 'log', streamSeq: event.seq ?? 0 });
        }
        afterSeq = page.nextAfterSeq;
      }
      for (const item of early ?? []) if (!('event' in item && item.stream === 'log' && replayed.has(item.event.id))) queue.push(item);
      early = undefined;
    }
  } catch (error) {
    await queue.close();
    throw error;
  }

  return {
    [Symbol.asyncIterator]: () => queue.iterate(),
    close: () => queue.close(),
    async drained() {
      if (queue.size() > 0) return false;
      // Both subjects come from one publisher in order; a round trip lets what the server already sent arrive.
      await nc.flush();
      return queue.size() === 0;
    },
  };
}

/** A page of history; a session that has no log yet has nothing to read back. */
async function readPage(readHistory: HistoryPage, sessionId: string, afterSeq: number, signal: AbortSignal | undefined): Promise<SessionHistoryReply> {
  try {
    return await readHistory(sessionId, afterSeq, signal);
  } catch (error) {
    if (error instanceof AgentbusError && error.code === ErrorCode.notFound) return { events: [] };
    throw error;
  }
}
