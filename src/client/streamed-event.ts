import type { AgentbusError } from '../errors.ts';
import type { AgentEvent } from '../protocol/index.ts';

/** Where an event came from, with its stream sequence: keep the last ones to resume after a restart. */
export interface StreamedEvent {
  readonly event: AgentEvent;
  readonly stream: 'log' | 'live';
  /**
   * The event's sequence in its JetStream stream; 0 for an event a watch without JetStream got by subscription
   * (`openCoreWatch`: resume such a watch from the last log `seq` it gave, or read the log back with `history`).
   */
  readonly streamSeq: number;
}

/**
 * A message on a watched session's subjects that is not a valid event (anyone who may publish there can put
 * anything there), skipped by the watch.
 */
export interface SkippedMessage {
  readonly stream: 'log' | 'live';
  readonly streamSeq: number;
  readonly subject: string;
  /**
   * Why: `invalid_input` (malformed bytes, a wrong shape, another session's event, a log event on a live
   * subject, …) or `payload_too_large`.
   */
  readonly error: AgentbusError;
}
