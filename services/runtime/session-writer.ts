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

/** What a session writer appends through. */
interface SessionWriterDeps {
  readonly tenant: string;
  readonly sessionId: string;
  readonly log: SessionLog;
  readonly envelopes: EnvelopeFactory;
  readonly transcript: Transcript;
}

/** Creates the writer of one session. */
export function createSessionWriter(deps: SessionWriterDeps): SessionWriter {
  return new SerialWriter(deps);
}

// A class, not closures: every hosted session has a writer, and methods on a prototype cost nothing per session.
class SerialWriter implements SessionWriter {
  /** The appends queued so far; undefined once they have all settled, so an idle writer holds no promise. */
  private tail: Promise<unknown> | undefined;
  private readonly deps: SessionWriterDeps;

  constructor(deps: SessionWriterDeps) {
    this.deps = deps;
  }

  append<T extends LogEventType>(type: T, scope: { turnId?: string; step?: number }, data: EventDataMap[T]): Promise<LogEvent> {
    return this.serialize(() => this.appendNow(type, scope, data));
  }

  exclusive<R>(job: (append: AppendFn) => Promise<R>): Promise<R> {
    return this.serialize(() => job((type, scope, data) => this.appendNow(type, scope, data)));
  }

  private serialize<R>(job: () => Promise<R>): Promise<R> {
    let run: Promise<R>;
    if (this.tail) {
      run = this.tail.then(job, job);
    } else {
      try {
        run = job();
      } catch (error) {
        run = Promise.reject(error);
      }
    }
    const tail: Promise<unknown> = run.then(
      () => this.settle(tail),
      () => this.settle(tail),
    );
    this.tail = tail;
    return run;
  }

  private settle(tail: Promise<unknown>): void {
    if (this.tail === tail) this.tail = undefined;
  }

  private async appendNow<T extends LogEventType>(type: T, scope: { turnId?: string; step?: number }, data: EventDataMap[T]): Promise<LogEvent> {
    const { deps } = this;
    const envelope = deps.envelopes.create(type, { tenant: deps.tenant, sessionId: deps.sessionId, ...scope }, data) as LogEvent;
    const seq = await deps.log.append(envelope, deps.transcript.lastSeq);
    const stored = withSeq(envelope, seq);
    deps.transcript.add(stored);
    return stored;
  }
}

/** The envelope as stored in the transcript: one object literal per shape, so its fields sit in the object itself. */
function withSeq(envelope: LogEvent, seq: number): LogEvent {
  const { v, id, type, tenant, sessionId, turnId, step, ts, data } = envelope;
  if (turnId !== undefined && step !== undefined) return { v, id, type, tenant, sessionId, turnId, step, ts, data, seq } as LogEvent;
  if (turnId !== undefined) return { v, id, type, tenant, sessionId, turnId, ts, data, seq } as LogEvent;
  return { ...envelope, seq } as LogEvent;
}
