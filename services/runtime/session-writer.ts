import type { SessionLog } from '../../src/bus/session-log.ts';
import type { EnvelopeFactory, EventDataMap, LogEvent, LogEventType } from '../../src/protocol/index.ts';
import type { Transcript } from './transcript.ts';

/** Appends an event (write-through) and returns it with its `seq`. */
export type AppendFn = <T extends LogEventType>(type: T, scope: { turnId?: string; step?: number }, data: EventDataMap[T]) => Promise<LogEvent>;

/** Appends one session's events to the log, one at a time, and keeps the transcript in step. */
export interface SessionWriter {
  append: AppendFn;
  /**
   * Runs `job` with exclusive use of the writer: no other append interleaves with the ones it makes
   * through the `append` it is given. For decisions that depend on what is already in the log (e.g.
   * which tool calls are still open).
   */
  exclusive<R>(job: (append: AppendFn) => Promise<R>): Promise<R>;
}

/** Creates the writer of one session. */
export function createSessionWriter(deps: {
  tenant: string;
  sessionId: string;
  log: SessionLog;
  envelopes: EnvelopeFactory;
  transcript: Transcript;
}): SessionWriter {
  let tail: Promise<unknown> = Promise.resolve();

  function serialize<R>(job: () => Promise<R>): Promise<R> {
    const run = tail.then(job, job);
    tail = run.catch(() => undefined);
    return run;
  }

  const appendNow: AppendFn = async (type, scope, data) => {
    const envelope = deps.envelopes.create(type, { tenant: deps.tenant, sessionId: deps.sessionId, ...scope }, data) as LogEvent;
    const seq = await deps.log.append(envelope, deps.transcript.lastSeq);
    const stored = { ...envelope, seq } as LogEvent;
    deps.transcript.add(stored);
    return stored;
  };

  return {
    append: (type, scope, data) => serialize(() => appendNow(type, scope, data)),
    exclusive: (job) => serialize(() => job(appendNow)),
  };
}
