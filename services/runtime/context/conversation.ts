import { LogEventType } from '../../../src/protocol/index.ts';
import type { ChatMessage, LogEvent } from '../../../src/protocol/index.ts';
import type { TokenCounter } from '../../../src/tokens.ts';
import { countAll, countAt, fitBudget, initialSize, totalBound, totalExceeds } from './conversation-fit.ts';
import type { ConversationFit, KeptFit, MessageSizes } from './conversation-fit.ts';

export type { ConversationFit } from './conversation-fit.ts';

/**
 * The conversation turn by turn, up to and including one turn, after the messages the summaries replaced:
 * what Preparing fits into the window. Index 0 is the oldest message.
 *
 * Tokens are counted only where a decision needs them. Each message gets a cheap upper bound of its count
 * when it is placed ({@link TokenCounter.boundMessage}: its UTF-8 length, give or take); its exact count is
 * taken, once, only when bounds cannot settle a question: whether the next message still fits a budget, or
 * whether the total passes a limit. So every answer is the one exact counts give (but a fit asked with a
 * `slack`, which may be short by less than it), and a conversation whose bounds fit is never counted at all.
 */
export interface ConversationView {
  /** Text of the newest `summary.created`, if any. */
  readonly summary: string | undefined;
  readonly length: number;
  /**
   * True when every tool result comes right after its call's assistant message (with only other results of
   * that message between) or opens the conversation (a summary took its call): then, of any suffix of the
   * view, only the leading tool results can lack their call. The runtime writes logs this way, and a summary
   * only takes the oldest messages, so the results it leaves open the conversation. A log written otherwise
   * may break it: the index checks each result as it places it, and all of them after a summary.
   */
  readonly resultsFollowCalls: boolean;
  message(index: number): ChatMessage;
  /** Log sequence of message `index`. */
  seq(index: number): number;
  /**
   * How many of the oldest messages a summary through log sequence `throughSeq` replaces: those up to and
   * including the one logged at `throughSeq`, where Preparing cut (see `buildContext`). Sequences are not in
   * order across turns (a prompt queued during a turn is logged before the rest of it), so this is a place
   * in the view, not every message logged up to `throughSeq`. For a sequence no message of the view has: the
   * messages before the first one logged after it. The compaction summarizes these, and a `summary.created`
   * through `throughSeq` of this view's turn takes them out of the conversation, and nothing else.
   */
  summaryCut(throughSeq: number): number;
  /** Exact tokens of message `index` (counted once, then kept). */
  tokens(index: number): number;
  /** Exact tokens of every message of the view: counts every message not counted yet. */
  totalTokens(): number;
  /** An upper bound of {@link totalTokens} from the counts taken and the bounds of the rest: a running total, O(turns queued after the view). */
  totalBound(): number;
  /** Exactly `totalTokens() > limit`, counting messages (newest first) only until the bounds of the rest settle it. */
  totalExceeds(limit: number): boolean;
  /**
   * The newest messages that fit `budget` tokens: the longest suffix `[start, length)` whose exact tokens sum
   * to at most `budget`. Messages are counted only where their bounds cannot tell whether the next older one
   * still fits. The last fits are kept, so asking the same budget again as the conversation grows at its end
   * costs O(new messages); anything else walks back from the newest message.
   *
   * `slack` (default 0) lets a counter that can count later ({@link TokenCounter.later}) leave up to that many
   * tokens of bounds uncounted in the window: the fit is then decided on them, so it never passes the budget
   * but may be short of older messages (less than `slack` tokens of them, besides message `start - 1`; the
   * answer says `short`), and they are counted later, off the caller's path; the next fit takes back what then
   * fits. Preparing passes a small share of the budget, so that a step's new messages are not counted on its path.
   */
  fit(budget: number, slack?: number): ConversationFit;
  /** Messages `[start, length)` as a new array, after `head` when given: one copy either way. */
  messages(start: number, head?: ChatMessage): ChatMessage[];
}

/**
 * The conversation of one session in turn order, kept in step with its log: the transcript adds each event
 * to it and takes a view of it for Preparing.
 */
export interface ConversationIndex {
  /**
   * Places the chat message of `event` (if it has one) at the end of its turn. A `summary.created` takes out
   * the messages it covers ({@link ConversationView.summaryCut} of its turn's view), and only those: other
   * turns' messages and the order of turns stay.
   */
  add(event: LogEvent): void;
  /** The conversation up to and including `currentTurnId` (every turn when absent). */
  view(currentTurnId?: string): ConversationView;
  /** Gives back the spare capacity of short lists, for a session about to sit idle. */
  trim(): void;
}

/** Lists shorter than this are copied to their exact size by `trim`. */
export const TRIM_BELOW = 64;

/**
 * The conversation index: parallel arrays in turn order (message `i` is `messages[i]`, logged at `seqs[i]`,
 * costing `tokens[i]`), each turn a contiguous range ending at `end`. An event of a turn that is not the
 * newest (a running turn after a queued prompt) is inserted at its turn's end; that moves only the messages
 * of the turns queued after it. A class: every hosted session has one, and methods on a prototype cost nothing per session.
 */
class TurnOrderedIndex implements ConversationIndex, MessageSizes {
  summary: { text: string; throughSeq: number } | undefined;
  readonly counter: TokenCounter | undefined;
  /** A plain array, so the window Preparing sends is one slice of it. */
  messages: ChatMessage[] = [];
  seqs: number[] = [];
  /** Each message's size: see {@link MessageSizes.tokens}. */
  tokens: number[] = [];
  turns: Array<{ readonly turnId: string; end: number }> = [];
  known = 0;
  uncounted = 0;
  uncountedBounds = 0;
  /** Tool results placed where {@link ConversationView.resultsFollowCalls} does not hold. */
  strayResults = 0;
  fits: KeptFit[] | undefined = undefined;
  settling = false;

  constructor(counter: TokenCounter | undefined) {
    this.summary = undefined;
    this.counter = counter;
  }

  add(event: LogEvent): void {
    place(this, event);
  }

  view(currentTurnId?: string): ConversationView {
    return new IndexView(this, currentTurnId);
  }

  trim(): void {
    if (this.messages.length >= TRIM_BELOW) return;
    this.messages = this.messages.slice();
    this.seqs = this.seqs.slice();
    this.tokens = this.tokens.slice();
    this.turns = this.turns.slice();
    if (this.fits) this.fits = this.fits.slice();
  }
}

/**
 * Builds the index of a session's events: the conversation in turn order, less what the summaries replaced.
 * It replays the log as `add` would have, so an index built at once and one kept in step agree. `counter`
 * bounds each message as it is placed and counts it when a view needs it; without one, a view answers no
 * question about tokens.
 */
export function createConversationIndex(events: readonly LogEvent[], counter?: TokenCounter): ConversationIndex {
  const built = new TurnOrderedIndex(counter);
  for (const event of events) place(built, event);
  return built;
}

/** Adds an event's chat message (if it has one) at the end of its turn, or applies a summary. */
function place(target: TurnOrderedIndex, event: LogEvent): void {
  if (event.type === LogEventType.summaryCreated) {
    summarize(target, event.turnId, event.data);
    return;
  }
  if (!event.turnId) return;
  const { turns, messages } = target;
  // A prompt opens its turn; any other event belongs to a turn opened before it, most often the newest.
  const isPrompt = event.type === LogEventType.userMessage && !event.data.steer;
  let turn: TurnOrderedIndex['turns'][number] | undefined;
  let at = turns.length - 1;
  for (; at >= 0 && !isPrompt; at--) {
    if (turns[at]!.turnId === event.turnId) {
      turn = turns[at];
      break;
    }
  }
  if (!turn) {
    // A turn begins with its prompt (a summary that took the prompt leaves the turn in its place, emptied).
    if (!isPrompt) return;
    turn = { turnId: event.turnId, end: messages.length };
    turns.push(turn);
    at = turns.length - 1;
  }
  const message = toChatMessage(event);
  if (!message) return;
  const position = turn.end;
  if (message.role === 'tool' && !followsItsCall(messages, position, message.toolCallId)) target.strayResults += 1;
  const size = initialSize(target.counter, message);
  if (position === messages.length) {
    messages.push(message);
    target.seqs.push(event.seq ?? 0);
    target.tokens.push(size);
  } else {
    // Whatever follows now has a new neighbour: a result there may no longer follow its call.
    if (messages[position]!.role === 'tool') target.strayResults += 1;
    messages.splice(position, 0, message);
    target.seqs.splice(position, 0, event.seq ?? 0);
    target.tokens.splice(position, 0, size);
    // A fit of messages past `position` no longer describes them; one that ends at or before it still does.
    if (target.fits) target.fits = target.fits.filter((fit) => fit.end <= position);
  }
  target.known += Math.abs(size);
  if (size < 0) {
    target.uncounted += 1;
    target.uncountedBounds -= size;
  }
  for (let later = at; later < turns.length; later++) turns[later]!.end += 1;
}

/**
 * Takes out the messages a summary covers: the oldest of its turn's view, up to its cut (a prefix of the index,
 * since a view is one). Turns queued after that view keep every message; a turn the summary emptied keeps
 * its place, so what it logs later still goes before the turns queued after it.
 */
function summarize(target: TurnOrderedIndex, turnId: string | undefined, summary: { text: string; throughSeq: number }): void {
  target.summary = { text: summary.text, throughSeq: summary.throughSeq };
  const cut = new IndexView(target, turnId).summaryCut(summary.throughSeq);
  if (cut === 0) return;
  for (const size of target.tokens.splice(0, cut)) {
    target.known -= Math.abs(size);
    if (size < 0) {
      target.uncounted -= 1;
      target.uncountedBounds += size;
    }
  }
  target.messages.splice(0, cut);
  target.seqs.splice(0, cut);
  for (const turn of target.turns) turn.end = Math.max(0, turn.end - cut);
  target.fits = undefined;
  // Results whose call was taken now open the conversation; count again what no longer follows its call.
  target.strayResults = 0;
  for (let at = 0; at < target.messages.length; at++) {
    const message = target.messages[at]!;
    if (message.role === 'tool' && !followsItsCall(target.messages, at, message.toolCallId)) target.strayResults += 1;
  }
}

/** Whether a result placed at `position` comes after its call's assistant message, past results only, or opens the conversation. */
function followsItsCall(messages: readonly ChatMessage[], position: number, toolCallId: string): boolean {
  let at = position - 1;
  while (at >= 0 && messages[at]!.role === 'tool') at -= 1;
  if (at < 0) return true;
  const asker = messages[at]!;
  return asker.role === 'assistant' && (asker.toolCalls?.some((call) => call.id === toolCallId) ?? false);
}

/** The view of an index up to the end of one turn. A class: Preparing takes one per step. */
class IndexView implements ConversationView {
  readonly summary: string | undefined;
  readonly length: number;
  readonly resultsFollowCalls: boolean;
  private readonly index: TurnOrderedIndex;

  constructor(index: TurnOrderedIndex, currentTurnId: string | undefined) {
    let length = index.messages.length;
    if (currentTurnId !== undefined) {
      for (let at = index.turns.length - 1; at >= 0; at--) {
        const turn = index.turns[at]!;
        if (turn.turnId === currentTurnId) {
          length = turn.end;
          break;
        }
      }
    }
    this.index = index;
    this.summary = index.summary?.text;
    this.length = length;
    this.resultsFollowCalls = index.strayResults === 0;
  }

  private check(at: number): number {
    if (!(at >= 0 && at < this.length)) throw new RangeError(`message ${at} is outside the conversation (${this.length} messages)`);
    return at;
  }

  /** The index, once it is known to have a counter. */
  private counting(): TurnOrderedIndex {
    if (!this.index.counter) throw new Error('this transcript was created without a token counter');
    return this.index;
  }

  message(at: number): ChatMessage {
    return this.index.messages[this.check(at)]!;
  }

  seq(at: number): number {
    return this.index.seqs[this.check(at)]!;
  }

  summaryCut(throughSeq: number): number {
    const { seqs } = this.index;
    let firstLater = this.length;
    for (let at = this.length - 1; at >= 0; at--) {
      if (seqs[at] === throughSeq) return at + 1;
      if (seqs[at]! > throughSeq) firstLater = at;
    }
    return firstLater;
  }

  tokens(at: number): number {
    return countAt(this.counting(), this.check(at));
  }

  totalTokens(): number {
    return countAll(this.counting(), this.length);
  }

  totalBound(): number {
    return totalBound(this.counting(), this.length);
  }

  totalExceeds(limit: number): boolean {
    return totalExceeds(this.counting(), this.length, limit);
  }

  fit(budget: number, slack?: number): ConversationFit {
    return fitBudget(this.counting(), this.length, budget, slack);
  }

  messages(start: number, head?: ChatMessage): ChatMessage[] {
    const { length } = this;
    if (!(start >= 0 && start <= length)) throw new RangeError(`window start ${start} is outside the conversation (${length} messages)`);
    const { messages } = this.index;
    if (head === undefined) return messages.slice(start, length);
    // Copy from one message earlier and put `head` in its place; from the first message, make room for it.
    const window = messages.slice(Math.max(0, start - 1), length);
    if (start === 0) window.unshift(head);
    else window[0] = head;
    return window;
  }
}

function toChatMessage(event: LogEvent): ChatMessage | undefined {
  switch (event.type) {
    case LogEventType.userMessage:
      return { role: 'user', content: event.data.text };
    case LogEventType.assistantMessage:
      return event.data.toolCalls.length > 0
        ? { role: 'assistant', content: event.data.text, toolCalls: event.data.toolCalls }
        : { role: 'assistant', content: event.data.text };
    case LogEventType.toolResult:
      return { role: 'tool', toolCallId: event.data.toolCallId, name: event.data.name, content: event.data.output, isError: event.data.isError };
    default:
      return undefined;
  }
}
