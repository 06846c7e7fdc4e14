/** Options of {@link pacedDispatch}. */
export interface PacedDispatchOptions {
  /** Items handled at once before the rest wait for the next turn of the event loop. */
  readonly perTurn: number;
  /** Runs a function on a later turn of the event loop; `setImmediate` unless a test gives another. */
  readonly later?: (run: () => void) => void;
}

/** A paced handler (see {@link pacedDispatch}): call it with each item. */
export interface PacedDispatch<T> {
  (item: T): void;
  /** Items waiting for a later turn of the loop. */
  readonly waiting: number;
  /**
   * Handles at once, in their order, the waiting items that `match` picks, ahead of their turn; the others keep
   * theirs. For a timer about to give up on something whose item may already be here, waiting: timers run
   * before the `setImmediate` that would hand it out.
   */
  handleWaiting(match: (item: T) => boolean): void;
}

/** Marks a waiting item taken out of order by `handleWaiting`. */
const TAKEN: unique symbol = Symbol('taken');

/**
 * Wraps a handler so that no turn of the event loop handles more than about `perTurn` items: the first ones are
 * handled at once, in order; past that they wait in a queue, and each later turn of the loop (one `setImmediate`,
 * scheduled again while anything waits) handles the next `perTurn`, between which timers run and the socket is read.
 *
 * Why: nats.js parses a socket read and calls every subscription's callback for it in one go, and each reply
 * handled starts a chain of microtasks (an actor's transition, the next publish) that also run before the loop
 * turns. A node that falls behind reads a larger backlog each time and holds the loop for all of it (hundreds of
 * milliseconds at 200 concurrent sessions); paced, its longest turn is `perTurn` items' work. Order is kept:
 * nothing is handled before anything that came before it, unless `handleWaiting` asks for it.
 *
 * @example
 * const dispatch = pacedDispatch((message: Msg) => route(message), { perTurn: 64 });
 * nc.subscribe(subject, { callback: (_error, message) => dispatch(message) });
 */
export function pacedDispatch<T>(handle: (item: T) => void, options: PacedDispatchOptions): PacedDispatch<T> {
  const perTurn = Math.max(1, options.perTurn);
  const later = options.later ?? setImmediate;
  let queue: Array<T | typeof TAKEN> = [];
  let head = 0;
  /** Items in `queue` past `head` not yet taken. */
  let waiting = 0;
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
    try {
      while (head < queue.length && handled < perTurn) {
        const item = queue[head];
        queue[head++] = TAKEN;
        if (item === TAKEN) continue;
        waiting--;
        handled++;
        handle(item as T);
      }
    } finally {
      if (waiting === 0) {
        queue = [];
        head = 0;
      } else {
        schedule();
      }
    }
  }

  const dispatch = (item: T): void => {
    // Nothing scheduled: the last batch's turn has run, so this is a turn of its own.
    if (!scheduled) handled = 0;
    if (waiting === 0 && handled < perTurn) {
      handled++;
      schedule();
      handle(item);
      return;
    }
    queue.push(item);
    waiting++;
    schedule();
  };

  function handleWaiting(match: (item: T) => boolean): void {
    for (let index = head; index < queue.length && waiting > 0; index++) {
      const item = queue[index];
      if (item === TAKEN || !match(item as T)) continue;
      queue[index] = TAKEN;
      waiting--;
      handle(item as T);
    }
  }

  return Object.defineProperties(dispatch, {
    waiting: { get: () => waiting },
    handleWaiting: { value: handleWaiting },
  }) as PacedDispatch<T>;
}
