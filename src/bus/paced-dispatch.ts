/** Options of {@link pacedDispatch}. */
export interface PacedDispatchOptions {
  /** Items handled at once before the rest wait for the next turn of the event loop. */
  readonly perTurn: number;
  /** Runs a function on a later turn of the event loop; `setImmediate` unless a test gives another. */
  readonly later?: (run: () => void) => void;
}

/**
 * Wraps a handler so that no turn of the event loop handles more than about `perTurn` items: the first ones are
 * handled at once, in order; past that they wait in a queue, and each later turn of the loop (one `setImmediate`,
 * scheduled again while anything waits) handles the next `perTurn`, between which timers run and the socket is read.
 *
 * Why: nats.js parses a socket read and calls every subscription's callback for it in one go, and each reply
 * handled starts a chain of microtasks (an actor's transition, the next publish) that also run before the loop
 * turns. A node that falls behind reads a larger backlog each time and holds the loop for all of it (hundreds of
 * milliseconds at 200 concurrent sessions); paced, its longest turn is `perTurn` items' work. Order is kept:
 * nothing is handled before anything that came before it.
 *
 * @example
 * const dispatch = pacedDispatch((message: Msg) => route(message), { perTurn: 64 });
 * nc.subscribe(subject, { callback: (_error, message) => dispatch(message) });
 */
export function pacedDispatch<T>(handle: (item: T) => void, options: PacedDispatchOptions): (item: T) => void {
  const perTurn = Math.max(1, options.perTurn);
  const later = options.later ?? setImmediate;
  let waiting: T[] = [];
  let head = 0;
  /** Items handled in this turn of the loop (since the last scheduled turn ran). */
  let handled = 0;
  let scheduled = false;

  function schedule(): void {
    if (scheduled) return;
    scheduled = true;
    later(turn);
  }

  function turn(): void {
    scheduled = false;
    handled = 0;
    const end = Math.min(waiting.length, head + perTurn);
    try {
      while (head < end) {
        const item = waiting[head]!;
        waiting[head++] = undefined as T;
        handled++;
        handle(item);
      }
    } finally {
      if (head >= waiting.length) {
        waiting = [];
        head = 0;
      } else {
        schedule();
      }
    }
  }

  return (item) => {
    // Nothing scheduled: the last batch's turn has run, so this is a turn of its own.
    if (!scheduled) handled = 0;
    if (head === waiting.length && handled < perTurn) {
      handled++;
      schedule();
      handle(item);
      return;
    }
    waiting.push(item);
    schedule();
  };
}
