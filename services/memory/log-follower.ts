import { DeliverPolicy, jetstream } from '@nats-io/jetstream';
import type { NatsConnection } from '@nats-io/nats-core';
import type { Logger } from '../../src/logging.ts';
import { LogEventType, contentTypeOf, logEventSchema } from '../../src/protocol/index.ts';
import type { Codec, LogEvent, MemoryEventType, Subjects } from '../../src/protocol/index.ts';
import { streamOnceThere } from './stream-once-there.ts';

/** A log event as read back before its sequence is set on it (distributive, so `type` still narrows `data`). */
export type UnsequencedEvent = LogEvent extends infer E ? (E extends LogEvent ? Omit<E, 'seq'> : never) : never;

/** What the follower hands on for each valid log event. */
export interface FollowedEvent {
  readonly tenant: string;
  readonly sessionId: string;
  readonly seq: number;
  readonly event: UnsequencedEvent;
}

/** Log events handled between two turns of the event loop. */
const YIELD_EVERY = 64;

/** Follows the session log from its first message, or from after a snapshot's. */
export interface LogFollower {
  /** Resolves once every message that was in the log when following began has been handed on. */
  readonly caughtUp: Promise<void>;
  /** The stream sequence of the last message handed on. */
  lastSeq(): number;
  stop(): void;
}

/** Options of {@link followLog}. */
export interface LogFollowerOptions {
  readonly nc: NatsConnection;
  readonly codec: Codec;
  readonly subjects: Subjects;
  readonly stream: string;
  readonly logger: Logger;
  readonly onEvent: (followed: FollowedEvent) => Promise<void> | void;
  /** Stops waiting for the log stream to exist. */
  readonly signal?: AbortSignal;
  /** Starts after this log sequence (a snapshot covers what came before); default 0, the log's start. */
  readonly afterSeq?: number;
}

/**
 * Reads every session's log, oldest first, through an ordered consumer (it resumes by itself across
 * reconnects), validating each event as clients do and skipping junk with one warning per kind. An event
 * whose envelope names another tenant or session than its subject is junk too: a tenant's memory is fed
 * only from that tenant's log subjects.
 */
export async function followLog(options: LogFollowerOptions): Promise<LogFollower> {
  const { nc, codec, subjects, logger } = options;
  const js = jetstream(nc);
  const target = (await streamOnceThere(nc, options.stream, { logger, what: 'the session log stream', ...(options.signal ? { signal: options.signal } : {}) })).lastSeq;
  const afterSeq = options.afterSeq ?? 0;
  const consumer = await js.consumers.get(options.stream, {
    filter_subjects: subjects.anyLog(),
    ...(afterSeq > 0 ? { deliver_policy: DeliverPolicy.StartSequence, opt_start_seq: afterSeq + 1 } : { deliver_policy: DeliverPolicy.All }),
  });
  const messages = await consumer.consume();
  let last = afterSeq;
  let resolveCaughtUp: () => void = () => undefined;
  const caughtUp = new Promise<void>((resolve) => {
    resolveCaughtUp = resolve;
  });
  // The stream's last sequence may name a message purged since (a deleted session): nothing left to read is
  // caught up too, told by the consumer's pending count (at its creation, then with each message).
  if (target <= afterSeq || (await consumer.info(true)).num_pending === 0) resolveCaughtUp();
  const skipped = new Set<string>();
  let handled = 0;
  void (async () => {
    for await (const message of messages) {
      const seq = message.seq;
      try {
        const parsed = subjects.parseSession(message.subject);
        const event = codec.validate(logEventSchema, codec.decode(message.data, contentTypeOf(message)), 'log event');
        if (!parsed || event.tenant !== parsed.tenant || event.sessionId !== parsed.sessionId) throw new Error('its envelope names another session than its subject');
        await options.onEvent({ tenant: parsed.tenant, sessionId: parsed.sessionId, seq, event: event as UnsequencedEvent });
      } catch (err) {
        const kind = err instanceof Error ? err.message.slice(0, 80) : 'unknown';
        if (!skipped.has(kind)) {
          skipped.add(kind);
          logger.warn({ err, seq, subject: message.subject }, 'skipped a log message that is not a valid event');
        }
      }
      last = seq;
      if (seq >= target || message.info.pending === 0) resolveCaughtUp();
      // Messages of a pulled batch come without a turn of the event loop between them: searches get theirs every few.
      if (++handled % YIELD_EVERY === 0) await new Promise((resolve) => setImmediate(resolve));
    }
  })().catch((err: unknown) => logger.error({ err }, 'log follower stopped'));
  return {
    caughtUp,
    lastSeq: () => last,
    stop: () => void messages.close(),
  };
}

/** The text memory keeps of an event, and as which type; undefined for events it does not index. */
export function indexedText(event: UnsequencedEvent): { type: MemoryEventType; text: string } | undefined {
  switch (event.type) {
    case LogEventType.userMessage:
      return event.data.text ? { type: LogEventType.userMessage, text: event.data.text } : undefined;
    case LogEventType.assistantMessage:
      return event.data.text ? { type: LogEventType.assistantMessage, text: event.data.text } : undefined;
    case LogEventType.toolResult:
      // Already scrubbed of secrets by the runtime before it was logged.
      return event.data.output ? { type: LogEventType.toolResult, text: `${event.data.name}: ${event.data.output}` } : undefined;
    case LogEventType.summaryCreated:
      return event.data.text ? { type: LogEventType.summaryCreated, text: event.data.text } : undefined;
    default:
      return undefined;
  }
}
