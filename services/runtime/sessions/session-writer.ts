import type { SessionLog } from '../../../src/bus/session-log.ts';
import { LogConflictError, TimeoutError } from '../../../src/errors.ts';
import type { EnvelopeFactory, EventDataMap, LogEvent, LogEventType } from '../../../src/protocol/index.ts';
import type { Scrubber } from '../../../src/scrub/index.ts';
import { argsForLog, carriesArgs, rememberingScrubber } from '../tools/logged-args.ts';
import type { Transcript } from './transcript.ts';
import { findUnacked } from './unacked-appends.ts';

/** Appends an event (write-through) and returns it with its `seq`. */
export type AppendFn = <T extends LogEventType>(type: T, scope: { turnId?: string; step?: number }, data: EventDataMap[T]) => Promise<LogEvent>;

/** Options of one append. */
export interface AppendOptions {
  /** Checked when the event's turn to be written comes: once aborted, the event is not appended (resolves undefined). */
  readonly unless?: AbortSignal;
}

/**
 * Appends one session's events to the log in order and keeps the transcript in step. Appends requested
 * while others are in flight are written together as one pipelined group (see `SessionLog.appendGroup`: its
 * events are stored in order, none behind another writer's): each still resolves only once its own event is
 * acknowledged. An append refused because messages that are not valid events of the session were stored on its log
 * subject is made again past them (a few times at most); one refused because another writer's event is there
 * rejects with `LogConflictError`. An append whose acknowledgement was lost is looked for in the log: found there,
 * stored in order and alone, it resolves as if acknowledged (see `findUnacked`).
 */
export interface SessionWriter {
  append: AppendFn;
  /** Like `append`, but skipped (resolving `undefined`) when `options.unless` is aborted by the time it is written. */
  appendUnless<T extends LogEventType>(type: T, scope: { turnId?: string; step?: number }, data: EventDataMap[T], options: AppendOptions): Promise<LogEvent | undefined>;
  /**
   * Like `append`, for an event the session's later events depend on and that its caller does not wait for
   * (`turn.started`): it is written last in its group, and when it fails the writer writes nothing more (every
   * later append, exclusive jobs' too, rejects with its failure), so the log never holds what follows without it.
   * The turn's end then cannot be written either: the session host gives the session up, and it is opened again
   * from its log (see `session-host.ts`).
   */
  appendRequired<T extends LogEventType>(type: T, scope: { turnId?: string; step?: number }, data: EventDataMap[T]): Promise<LogEvent>;
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
  /**
   * The sequence the log was read through when the session opened (`SessionLogRead.lastSeq`): past the
   * transcript's last event when the log's last messages were invalid and skipped.
   */
  readonly readSeq?: number;
  /**
   * Called before each write; a rejection (a `LogConflictError`: the session is another node's now) fails the
   * write. Returns undefined when there is nothing to wait for (the common case costs no await).
   */
  readonly beforeWrite?: () => Promise<void> | undefined;
  /**
   * Scrubs the arguments of tool calls before they are logged (see `argsForLog`); the caller keeps the real ones.
   * Without it they are logged as given (tests of the writer alone).
   */
  readonly scrubber?: Pick<Scrubber, 'scrubValue'>;
}

/** Creates the writer of one session. */
export function createSessionWriter(deps: SessionWriterDeps): SessionWriter {
  return new SerialWriter(deps);
}

/** An append waiting for its turn. */
interface PendingAppend {
  readonly kind: 'append';
  readonly type: LogEventType;
  readonly scope: { turnId?: string; step?: number };
  readonly data: EventDataMap[LogEventType];
  readonly unless: AbortSignal | undefined;
  /** See `SessionWriter.appendRequired`. */
  readonly required: boolean;
  readonly resolve: (event: LogEvent | undefined) => void;
  readonly reject: (error: unknown) => void;
}

/** An exclusive job waiting for its turn. */
interface PendingJob {
  readonly kind: 'job';
  readonly run: () => Promise<void>;
}

/** At most this many appends go out as one group. */
const MAX_GROUP = 32;

/**
 * How many times an append refused only because of invalid messages stored on the log subject is made again
 * past them: a flood of junk ends the append with the refusal instead of spinning.
 */
export const MAX_JUNK_RETRIES = 3;

// A class, not closures: every hosted session has a writer, and methods on a prototype cost nothing per session.
class SerialWriter implements SessionWriter {
  /** Work waiting while a group or job runs; undefined when idle, so an idle writer holds nothing. */
  private queue: Array<PendingAppend | PendingJob> | undefined;
  private busy = false;
  private scheduled = false;
  private readonly deps: SessionWriterDeps;
  /** The last message known to be stored on the log past the transcript's events and skipped (see `readSeq`). */
  private skippedSeq: number;
  /** The scrubber, remembering the arguments it scrubbed (see {@link rememberingScrubber}); made on first use. */
  private argsScrubber: Pick<Scrubber, 'scrubValue'> | undefined;
  /** The failure of a required append: nothing more is written (see `appendRequired`). */
  private failure: { readonly error: unknown } | undefined;

  constructor(deps: SessionWriterDeps) {
    this.deps = deps;
    this.skippedSeq = deps.readSeq ?? 0;
  }

  append<T extends LogEventType>(type: T, scope: { turnId?: string; step?: number }, data: EventDataMap[T]): Promise<LogEvent> {
    return this.enqueueAppend(type, scope, data, undefined, false) as Promise<LogEvent>;
  }

  appendUnless<T extends LogEventType>(type: T, scope: { turnId?: string; step?: number }, data: EventDataMap[T], options: AppendOptions): Promise<LogEvent | undefined> {
    return this.enqueueAppend(type, scope, data, options.unless, false);
  }

  appendRequired<T extends LogEventType>(type: T, scope: { turnId?: string; step?: number }, data: EventDataMap[T]): Promise<LogEvent> {
    return this.enqueueAppend(type, scope, data, undefined, true) as Promise<LogEvent>;
  }

  exclusive<R>(job: (append: AppendFn) => Promise<R>): Promise<R> {
    return new Promise<R>((resolve, reject) => {
      const run = async () => {
        try {
          resolve(await job((type, scope, data) => this.appendOne(type, scope, data)));
        } catch (error) {
          reject(error);
        }
      };
      (this.queue ??= []).push({ kind: 'job', run });
      this.schedule();
    });
  }

  private enqueueAppend(
    type: LogEventType,
    scope: { turnId?: string; step?: number },
    data: EventDataMap[LogEventType],
    unless: AbortSignal | undefined,
    required: boolean,
  ): Promise<LogEvent | undefined> {
    return new Promise((resolve, reject) => {
      (this.queue ??= []).push({ kind: 'append', type, scope, data, unless, required, resolve, reject });
      this.schedule();
    });
  }

  /** Starts the next group a microtask later, so appends requested together (a step's tool calls) go out together. */
  private schedule(): void {
    if (this.busy || this.scheduled) return;
    this.scheduled = true;
    queueMicrotask(() => {
      this.scheduled = false;
      this.pump();
    });
  }

  private pump(): void {
    if (this.busy) return;
    const queue = this.queue;
    if (!queue || queue.length === 0) {
      this.queue = undefined;
      return;
    }
    this.busy = true;
    const head = queue[0]!;
    let work: Promise<void>;
    if (head.kind === 'job') {
      queue.shift();
      work = head.run();
    } else {
      let count = 0;
      while (count < queue.length && count < MAX_GROUP && queue[count]!.kind === 'append') {
        count += 1;
        // What follows a required append goes out only once it is stored.
        if ((queue[count - 1] as PendingAppend).required) break;
      }
      work = this.writeGroup(queue.splice(0, count) as PendingAppend[]);
    }
    void work.finally(() => {
      this.busy = false;
      this.pump();
    });
  }

  private async writeGroup(group: readonly PendingAppend[]): Promise<void> {
    const { deps } = this;
    const written: PendingAppend[] = [];
    const envelopes: LogEvent[] = [];
    if (this.failure) {
      for (const pending of group) pending.reject(this.failure.error);
      return;
    }
    for (const pending of group) {
      // Scrubbed while the writer is busy with this group: appends stay in the order they were asked for.
      let data = pending.data;
      try {
        const scrubbing = this.scrubbing(pending.type, pending.data);
        if (scrubbing) data = await scrubbing;
      } catch (error) {
        pending.reject(error);
        if (pending.required) this.failure ??= { error };
        continue;
      }
      if (pending.unless?.aborted) {
        pending.resolve(undefined);
        continue;
      }
      written.push(pending);
      envelopes.push(this.envelope(pending.type, pending.scope, data));
    }
    if (envelopes.length === 0) return;
    const stored: Array<LogEvent | undefined> = [];
    try {
      await this.storeAll(envelopes, stored);
    } catch (error) {
      written.forEach((pending, index) => {
        const event = stored[index];
        if (event) pending.resolve(event);
        else pending.reject(error);
        if (!event && pending.required) this.failure ??= { error };
      });
      return;
    }
    written.forEach((pending, index) => pending.resolve(stored[index]));
  }

  /** The event's data as it is to be logged, tool-call arguments scrubbed; undefined for events without any. */
  private scrubbing<T extends LogEventType>(type: T, data: EventDataMap[T]): Promise<EventDataMap[T]> | undefined {
    const scrubber = this.deps.scrubber;
    // The remembering scrubber (a WeakMap) is made only by a session that logs arguments: an idle one without any keeps none.
    if (!scrubber || !carriesArgs(type, data)) return undefined;
    return argsForLog((this.argsScrubber ??= rememberingScrubber(scrubber)), type, data);
  }

  private envelope(type: LogEventType, scope: { turnId?: string; step?: number }, data: EventDataMap[LogEventType]): LogEvent {
    const { deps } = this;
    return deps.envelopes.create(type, { tenant: deps.tenant, sessionId: deps.sessionId, ...scope }, data) as LogEvent;
  }

  /** One append of an exclusive job: the job already holds the writer. */
  private async appendOne<T extends LogEventType>(type: T, scope: { turnId?: string; step?: number }, data: EventDataMap[T]): Promise<LogEvent> {
    if (this.failure) throw this.failure.error;
    const stored: Array<LogEvent | undefined> = [];
    const scrubbing = this.scrubbing(type, data);
    await this.storeAll([this.envelope(type, scope, scrubbing ? await scrubbing : data)], stored);
    return stored[0]!;
  }

  /** The sequence the next append expects: the transcript's last event, or a skipped message after it. */
  private expectedSeq(): number {
    return Math.max(this.deps.transcript.lastSeq, this.skippedSeq);
  }

  /**
   * Appends `envelopes` in order (one append, or a pipelined group), setting `stored[i]` (and adding it to the
   * transcript) as each is acknowledged. A group is stored in order or not past its first refusal (see
   * `SessionLog.appendGroup`): nothing of it lands behind another writer's event. When an append is refused because
   * the log moved past the expected sequence, what was stored there is read: messages that are not valid events of
   * this session (anyone may publish on the log subject) are stepped over and what is left is appended again past
   * them (under new ids), at most {@link MAX_JUNK_RETRIES} times. A valid event of this session there means another writer: the
   * refusal goes on.
   */
  private async storeAll(envelopes: readonly LogEvent[], stored: Array<LogEvent | undefined>): Promise<void> {
    const { deps } = this;
    // What goes out: an event refused once goes out again under a new id (see `AppendGroupOptions.renew`).
    const current = [...envelopes];
    const record = (index: number, seq: number, event: LogEvent) => {
      const appended = withSeq(event, seq);
      deps.transcript.add(appended);
      stored[index] = appended;
    };
    const renew = (event: LogEvent) => this.envelope(event.type, scopeOf(event), event.data);
    // A group's event sent again under a new id is known by that id from then on (see `recoverUnacked`).
    const renewInGroup = (event: LogEvent) => {
      const renewed = renew(event);
      const at = current.indexOf(event);
      if (at >= 0) current[at] = renewed;
      return renewed;
    };
    for (let attempt = 0; ; attempt++) {
      const pending: number[] = [];
      current.forEach((_, index) => {
        if (!stored[index]) pending.push(index);
      });
      const expectedSeq = this.expectedSeq();
      let sent = false;
      try {
        const guard = deps.beforeWrite?.();
        if (guard) await guard;
        sent = true;
        if (pending.length === 1) {
          const event = current[pending[0]!]!;
          record(pending[0]!, await deps.log.append(event, expectedSeq), event);
        } else {
          await deps.log.appendGroup(
            pending.map((index) => current[index]!),
            expectedSeq,
            (position, seq, event) => record(pending[position]!, seq, event),
            { renew: renewInGroup },
          );
        }
        return;
      } catch (error) {
        if (sent && error instanceof TimeoutError) {
          await this.recoverUnacked(current, stored, record, error);
          return;
        }
        if (!(error instanceof LogConflictError) || attempt >= MAX_JUNK_RETRIES) throw error;
        // Invalid messages are reported at warn by the read, as when a session is opened. Read past what the refused
        // append expected: the group's events stored before it (in the transcript now), not `expectedSeq`.
        const moved = await deps.log.read(deps.tenant, deps.sessionId, { after: this.expectedSeq() });
        if (moved.events.length > 0) throw error;
        this.skippedSeq = moved.lastSeq;
        for (const index of pending) if (!stored[index]) current[index] = renew(current[index]!);
      }
    }
  }

  /**
   * After an append (or one of a group) got no acknowledgement (`timeout`): JetStream may have stored it and lost
   * the reply, and stored the group's later events too (each chained to the one before it). What the log holds past
   * the last sequence known is read (see `findUnacked`): this writer's events not yet acknowledged, stored in order
   * and nothing else, are recorded as acknowledged at the sequences read. Resolves once all of them are; otherwise
   * rejects: with a `LogConflictError` when another event of the session is there (another writer: the session is
   * given up), else with `timeout` for those not found (not stored, or the log not read in time: the writer expects
   * the last sequence it knows, and an event stored later is found as another writer's at its next append).
   */
  private async recoverUnacked(
    current: readonly LogEvent[],
    stored: ReadonlyArray<LogEvent | undefined>,
    record: (index: number, seq: number, event: LogEvent) => void,
    timeout: TimeoutError,
  ): Promise<void> {
    const { deps } = this;
    const unacked: number[] = [];
    current.forEach((_, index) => {
      if (!stored[index]) unacked.push(index);
    });
    const after = this.expectedSeq();
    const outcome = await findUnacked(deps.log, { tenant: deps.tenant, sessionId: deps.sessionId, after }, unacked.map((index) => current[index]!.id));
    if (outcome?.kind === 'foreign') throw new LogConflictError(deps.sessionId, after, { cause: timeout });
    outcome?.seqs.forEach((seq, position) => record(unacked[position]!, seq, current[unacked[position]!]!));
    if (!outcome || outcome.seqs.length < unacked.length) throw timeout;
  }
}

/** The turn and step an event belongs to. */
function scopeOf(event: LogEvent): { turnId?: string; step?: number } {
  const scope: { turnId?: string; step?: number } = {};
  if (event.turnId !== undefined) scope.turnId = event.turnId;
  if (event.step !== undefined) scope.step = event.step;
  return scope;
}

/** The envelope as stored in the transcript: one object literal per shape, so its fields sit in the object itself. */
function withSeq(envelope: LogEvent, seq: number): LogEvent {
  const { v, id, type, tenant, sessionId, turnId, step, ts, data } = envelope;
  if (turnId !== undefined && step !== undefined) return { v, id, type, tenant, sessionId, turnId, step, ts, data, seq } as LogEvent;
  if (turnId !== undefined) return { v, id, type, tenant, sessionId, turnId, ts, data, seq } as LogEvent;
  return { ...envelope, seq } as LogEvent;
}
