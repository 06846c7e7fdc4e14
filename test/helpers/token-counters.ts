import type { ChatMessage } from '../../src/protocol/index.ts';
import type { TokenCounter } from '../../src/tokens.ts';
import { createCharCounter } from './log-events.ts';

/**
 * A counter like `createCharCounter` (a message costs its length + 1) that also has a cheap bound, loose by a
 * varying amount (here: about twice the count), so that bounds settle some questions and not others. `calls`
 * says how many exact counts were taken, `bounds` how many bounds.
 */
export function createBoundedCharCounter(): TokenCounter & { readonly calls: () => number; readonly bounds: () => number } {
  let bounds = 0;
  return {
    ...createCharCounter(),
    boundMessage: (message: ChatMessage) => {
      bounds += 1;
      return 2 * message.content.length + 1 + (message.content.length % 3);
    },
    bounds: () => bounds,
  };
}

/** `counter` without its bound: every message is counted exactly when placed, as a counter without a bound is. */
export function exactOnly(counter: TokenCounter): TokenCounter {
  return { count: (text) => counter.count(text), countMessage: (message) => counter.countMessage(message) };
}
