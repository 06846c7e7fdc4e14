import type { AgentbusClient, SessionTarget, WatchFrom } from '../../src/client/index.ts';
import type { EventWatch, StreamedEvent } from '../../src/client/index.ts';
import { LogEventType } from '../../src/protocol/index.ts';
import { createUiMessageEncoder } from './ui-message-encoder.ts';
import type { UiChunk } from './ui-message-encoder.ts';

/** Where a UI message stream stands: the last log and live sequences it sent, the SSE event id `<log>-<live>`. */
export interface StreamPosition {
  readonly log: number;
  readonly live: number;
}

/** The SSE event id of a position. */
export const eventIdOf = (position: StreamPosition): string => `${position.log}-${position.live}`;

/** The position a `Last-Event-ID` names, or undefined when it names none. */
export function parseEventId(value: string | undefined): StreamPosition | undefined {
  const match = value === undefined ? null : /^(\d{1,15})-(\d{1,15})$/.exec(value.trim());
  return match ? { log: Number(match[1]), live: Number(match[2]) } : undefined;
}

/** The last turn of a session as its log tells: its id, the sequence of its `turn.started`, and whether it ended. */
export interface LastTurn {
  readonly turnId: string;
  readonly startedSeq: number;
  readonly ended: boolean;
}

/**
 * The session's last turn, read from its log through `history` (memory serves it) page by page from the newest
 * `turn.started` memory has indexed (`fromLastTurn`): memory may lag the log, so the pages after it are read to the end,
 * and a later turn found there wins. A resume costs the last turn's events, not the session's whole history. Undefined
 * for a session without turns (or none).
 */
export async function findLastTurn(client: AgentbusClient, target: SessionTarget, signal: AbortSignal): Promise<LastTurn | undefined> {
  let last: LastTurn | undefined;
  let afterSeq: number | undefined;
  for (;;) {
    const page = await client.history(target, { limit: 500, ...(afterSeq === undefined ? { fromLastTurn: true } : { afterSeq }) }, { signal, timeoutMs: 10_000 });
    for (const event of page.events) {
      if (event.type === LogEventType.turnStarted && event.turnId) last = { turnId: event.turnId, startedSeq: event.seq ?? 0, ended: false };
      else if (event.type === LogEventType.turnEnded && last && event.turnId === last.turnId) last = { ...last, ended: true };
    }
    if (page.nextAfterSeq === undefined) return last;
    afterSeq = page.nextAfterSeq;
  }
}

/** Writes one chunk with its event id; resolves when the socket took it (backpressure). */
export type WriteChunk = (chunk: UiChunk, id: string) => Promise<void>;

/** How long a resumed stream waits for more of what the client already has before it asks the watch whether it has drained. */
const CATCH_UP_IDLE_MS = 200;

/**
 * Streams one turn of an open watch as UI message chunks, each with the position after it as its id, until the
 * turn's `finish` (true), a pause where the turn waits for a human (approvals, tools' questions: true), or the watch
 * ends (false: the client went away, or the signal aborted).
 *
 * With `sentThrough` (a `Last-Event-ID`) the watch starts at the turn's beginning, and the encoder must learn what
 * the client already has before it encodes anything new: the log and the live stream arrive in no fixed order
 * between them, so events past that position are held until both streams have passed it (or the watch has handed
 * out all it holds), then encoded after everything the client has, which is encoded but not sent. Each piece of
 * text then goes out once, as long as the live stream still keeps the deltas the client got (5 minutes).
 * `toolCallsShown`: tool calls the client already shows (those it just decided or answered), whose input is not sent again.
 */
export async function streamTurn(watch: EventWatch, turnId: string, write: WriteChunk, sentThrough?: StreamPosition, toolCallsShown?: readonly string[]): Promise<boolean> {
  const encoder = createUiMessageEncoder(turnId, toolCallsShown ? { toolCallsShown } : {});
  let position: StreamPosition = sentThrough ?? { log: 0, live: 0 };
  const sent = (streamed: StreamedEvent) => sentThrough !== undefined && streamed.streamSeq <= (streamed.stream === 'log' ? sentThrough.log : sentThrough.live);
  const encode = async (streamed: StreamedEvent) => {
    const chunks = encoder.push(streamed.event);
    if (sent(streamed)) return;
    position = streamed.stream === 'log' ? { ...position, log: Math.max(position.log, streamed.streamSeq) } : { ...position, live: Math.max(position.live, streamed.streamSeq) };
    for (const chunk of chunks) await write(chunk, eventIdOf(position));
  };

  const events = watch[Symbol.asyncIterator]();
  let held: StreamedEvent[] | undefined = sentThrough ? [] : undefined;
  const seen = { log: 0, live: 0 };
  const release = async () => {
    const waiting = held ?? [];
    held = undefined;
    for (const streamed of waiting.filter(sent)) await encode(streamed);
    for (const streamed of waiting.filter((streamed) => !sent(streamed))) await encode(streamed);
  };
  // A turn that waits for a human (approvals, questions) ends this stream once the watch has handed out all it holds
  // and nothing decided or answered them meanwhile: the client answers with a new request (see UiMessageEncoder.pause).
  const pause = async () => {
    const chunks = encoder.pause();
    for (const chunk of chunks) await write(chunk, eventIdOf(position));
  };
  let pending: Promise<IteratorResult<StreamedEvent>> | undefined;
  for (;;) {
    pending ??= events.next();
    let next: IteratorResult<StreamedEvent> | 'idle';
    if (held || encoder.awaitingHuman.length > 0) {
      let timer: ReturnType<typeof setTimeout> | undefined;
      next = await Promise.race([pending, new Promise<'idle'>((resolve) => (timer = setTimeout(() => resolve('idle'), CATCH_UP_IDLE_MS)))]);
      clearTimeout(timer);
    } else {
      next = await pending;
    }
    if (next === 'idle') {
      if (await watch.drained()) {
        if (held) await release();
        else await pause();
      }
      if (encoder.finished) return true;
      continue;
    }
    pending = undefined;
    if (next.done) break;
    const streamed = next.value;
    if (held) {
      held.push(streamed);
      seen[streamed.stream] = Math.max(seen[streamed.stream], streamed.streamSeq);
      if (seen.log >= sentThrough!.log && seen.live >= sentThrough!.live) await release();
    } else {
      await encode(streamed);
    }
    if (encoder.finished) return true;
  }
  if (held) await release();
  return encoder.finished;
}

/** Opens a watch on one session from a position (`undefined`: from what comes next). */
export function openSessionWatch(client: AgentbusClient, target: SessionTarget, signal: AbortSignal, from?: WatchFrom): Promise<EventWatch> {
  return client.watch(target, { signal, ...(from ? { from } : {}) });
}
