import type { SessionVerb } from '../../../src/protocol/index.ts';
import type { MessageOrigin, SessionMessage } from './forward.ts';

/** A session message this node kept because another node held the session when it arrived. */
export interface ParkedMessage {
  readonly verb: SessionVerb;
  readonly message: SessionMessage;
  /** The subject it was published on, and how many forwards it took to reach this node. */
  readonly origin: MessageOrigin;
}

/**
 * Messages to sessions another node holds, kept for a while in case that node is dead. The node that hears a
 * message (one of the queue group) and passes it on to the session's holder keeps a copy: a holder that just
 * died hears nothing, so without it a message sent in the seconds before its death is found would get no
 * answer at all. It is kept for `keepMs` (longer than it takes to find a node dead), and when the holder is
 * found dead the node that kept it claims the session and handles it (a prompt the dead node had logged
 * already is recognised by its request, and not run twice). Bounded in bytes: the oldest go first, and are counted.
 */
export interface ParkedMessages {
  park(owner: string, parked: ParkedMessage): void;
  /** Takes every message kept for `owner`, oldest first. */
  take(owner: string): ParkedMessage[];
  /**
   * Drops what is older than `keepMs` (its owner lived on, so it was answered); returns how many were dropped
   * for room since the last call, unanswered if their owner died.
   */
  prune(): number;
}

interface Entry extends ParkedMessage {
  readonly owner: string;
  readonly at: number;
  readonly bytes: number;
}

/**
 * @example
 * const parked = createParkedMessages({ keepMs: 6000, maxBytes: 64 * 1024 * 1024, clock: () => performance.now() });
 * parked.park('node-a', { verb: SessionVerb.prompt, message, origin: directOrigin(message) });
 * for (const { verb, message, origin } of parked.take('node-a')) void handle(verb, message, origin);
 */
export function createParkedMessages(options: { keepMs: number; maxBytes: number; clock?: () => number }): ParkedMessages {
  const clock = options.clock ?? (() => performance.now());
  // Arrival order across owners, from `head` on: pruning by age and by room both take from the front.
  let queue: Array<Entry | undefined> = [];
  let head = 0;
  let bytes = 0;
  let dropped = 0;

  const shift = () => {
    const entry = queue[head];
    queue[head] = undefined;
    head += 1;
    if (entry) bytes -= entry.bytes;
    if (head > 1024 && head * 2 > queue.length) {
      queue = queue.slice(head);
      head = 0;
    }
    return entry;
  };

  return {
    park(owner, { verb, message, origin }) {
      const size = message.data.length + message.subject.length + origin.subject.length + 64;
      queue.push({ owner, verb, message, origin, at: clock(), bytes: size });
      bytes += size;
      while (bytes > options.maxBytes && head < queue.length - 1) if (shift()) dropped += 1;
    },
    take(owner) {
      const taken: ParkedMessage[] = [];
      for (let at = head; at < queue.length; at += 1) {
        const entry = queue[at];
        if (entry?.owner !== owner) continue;
        taken.push({ verb: entry.verb, message: entry.message, origin: entry.origin });
        bytes -= entry.bytes;
        queue[at] = undefined;
      }
      return taken;
    },
    prune() {
      const cutoff = clock() - options.keepMs;
      while (head < queue.length && (queue[head] === undefined || queue[head]!.at < cutoff)) shift();
      const count = dropped;
      dropped = 0;
      return count;
    },
  };
}
