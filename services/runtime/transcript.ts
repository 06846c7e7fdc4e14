import { LogEventType } from '../../src/protocol/index.ts';
import type { ChatMessage, LogEvent, ToolCall, Usage } from '../../src/protocol/index.ts';
import { ZERO_USAGE, addUsage } from '../../src/protocol/index.ts';
import type { TokenCounter } from '../../src/tokens.ts';
import type { ApprovalDecision } from '../../machines/index.ts';

/** One turn found in the log that has no `turn.ended`. */
export interface UnfinishedTurn {
  readonly turnId: string;
  readonly prompt: Extract<LogEvent, { type: 'user.message' }>['data'];
  /** Step of the newest assistant message, 0 when the model has not answered yet. */
  readonly lastStep: number;
  /** Tool calls of the newest assistant message without a result. */
  readonly openCalls: readonly ToolCall[];
  /** True when the newest assistant message asked for no tools: the turn had yielded. */
  readonly answered: boolean;
  readonly text: string;
  readonly usage: Usage;
  readonly cost: number;
  readonly decisions: Readonly<Record<string, ApprovalDecision>>;
}

/**
 * The conversation after the newest summary, turn by turn, up to and including one turn: what Preparing
 * fits into the window. Index 0 is the oldest message. Token counts are taken on first use and kept, so a
 * step only counts messages it has not seen before.
 */
export interface ConversationView {
  /** Text of the newest `summary.created`, if any. */
  readonly summary: string | undefined;
  readonly length: number;
  message(index: number): ChatMessage;
  /** Log sequence of message `index`. */
  seq(index: number): number;
  /** Tokens of message `index` (counted once, then cached). */
  tokens(index: number): number;
  /** Tokens of every message of the view: a running total, so O(1) once every message has been counted. */
  totalTokens(): number;
}

/** The in-memory view of one session's log. */
export interface Transcript {
  readonly events: readonly LogEvent[];
  readonly lastSeq: number;
  add(event: LogEvent): void;
  /**
   * The conversation as chat messages after the newest summary, turn by turn (a prompt logged during another
   * turn goes after that turn), up to and including `currentTurnId` (every turn when absent). Kept up to date
   * as events are added, so taking it costs O(turns queued after `currentTurnId`), not O(history).
   */
  conversation(currentTurnId?: string): ConversationView;
  /** Events of one turn, in log order: a walk back from the newest event to the turn's prompt. */
  turnEvents(turnId: string): LogEvent[];
  /** Tool calls of a turn that have no `tool.result`. */
  openCalls(turnId: string): ToolCall[];
  /** Turns with a `user.message` and no `turn.ended`, oldest first. */
  unfinishedTurns(): UnfinishedTurn[];
  /** Gives back the spare capacity of short lists, for a session about to sit idle. */
  trim(): void;
}

/** One chat message of the conversation with its log sequence and token count. */
interface ConversationEntry {
  readonly message: ChatMessage;
  readonly seq: number;
  tokens: number;
}

/** Lists shorter than this are copied to their exact size by `trim`. */
const TRIM_BELOW = 64;

/** Marks a token count not taken yet. */
const UNCOUNTED = -1;

/**
 * The conversation index: flat arrays in turn order, each turn a contiguous range ending at `end`. An event of
 * a turn that is not the newest (a running turn after a queued prompt) is inserted at its turn's end; that
 * moves only the messages of the turns queued after it.
 */
interface ConversationIndex {
  summary: { text: string; throughSeq: number } | undefined;
  entries: ConversationEntry[];
  turns: Array<{ readonly turnId: string; end: number }>;
  /** Sum of the counts taken so far, and how many are still `UNCOUNTED`. */
  counted: number;
  uncounted: number;
}

/**
 * Builds a transcript from events read back from the log (each with `seq`). `tokens` counts messages for
 * {@link ConversationView.tokens}.
 */
export function createTranscript(initial: readonly LogEvent[] = [], tokens?: TokenCounter): Transcript {
  return new SessionTranscript(initial, tokens);
}

// A class, not a closure per method: every hosted session has one, and methods on a prototype cost nothing per session.
class SessionTranscript implements Transcript {
  events: LogEvent[];
  lastSeq = 0;
  /** Built on first use, then kept in step by `add`; rebuilt when a summary cuts the conversation. */
  private index: ConversationIndex | undefined;
  private readonly counter: TokenCounter | undefined;

  constructor(initial: readonly LogEvent[], counter: TokenCounter | undefined) {
    this.events = [...initial];
    this.counter = counter;
    for (const event of initial) if ((event.seq ?? 0) > this.lastSeq) this.lastSeq = event.seq ?? 0;
  }

  add(event: LogEvent): void {
    this.events.push(event);
    if (event.seq !== undefined && event.seq > this.lastSeq) this.lastSeq = event.seq;
    if (!this.index) return;
    if (event.type === LogEventType.summaryCreated) this.index = undefined;
    else place(this.index, event);
  }

  conversation(currentTurnId?: string): ConversationView {
    this.index ??= buildIndex(this.events);
    return viewOf(this.index, currentTurnId, this.counter);
  }

  turnEvents(turnId: string): LogEvent[] {
    const found: LogEvent[] = [];
    for (let at = this.events.length - 1; at >= 0; at--) {
      const event = this.events[at]!;
      if (event.turnId !== turnId) continue;
      found.push(event);
      // Every event of a turn comes after its prompt.
      if (event.type === LogEventType.userMessage && !event.data.steer) break;
    }
    return found.reverse();
  }

  openCalls(turnId: string): ToolCall[] {
    const asked: ToolCall[] = [];
    const answered = new Set<string>();
    for (const event of this.turnEvents(turnId)) {
      if (event.type === LogEventType.assistantMessage) asked.push(...event.data.toolCalls);
      if (event.type === LogEventType.toolResult) answered.add(event.data.toolCallId);
    }
    return asked.filter((call) => !answered.has(call.id));
  }

  trim(): void {
    // A list grown by push keeps room for ~17 entries; an idle session with a short history need not.
    if (this.events.length < TRIM_BELOW) this.events = this.events.slice();
    const index = this.index;
    if (index && index.entries.length < TRIM_BELOW) {
      index.entries = index.entries.slice();
      index.turns = index.turns.slice();
    }
  }

  unfinishedTurns(): UnfinishedTurn[] {
    const { events } = this;
    const ended = new Set<string>();
    for (const event of events) if (event.type === LogEventType.turnEnded && event.turnId) ended.add(event.turnId);
    const turns: UnfinishedTurn[] = [];
    for (const event of events) {
      if (event.type !== LogEventType.userMessage || event.data.steer || !event.turnId || ended.has(event.turnId)) continue;
      turns.push(summarizeTurn(events, event.turnId, event.data));
    }
    return turns;
  }
}

function buildIndex(events: readonly LogEvent[]): ConversationIndex {
  let summary: ConversationIndex['summary'];
  for (let at = events.length - 1; at >= 0 && !summary; at--) {
    const event = events[at];
    if (event?.type === LogEventType.summaryCreated) summary = event.data;
  }
  const built: ConversationIndex = { summary, entries: [], turns: [], counted: 0, uncounted: 0 };
  for (const event of events) place(built, event);
  return built;
}

/** Adds an event's chat message (if it has one) at the end of its turn. */
function place(target: ConversationIndex, event: LogEvent): void {
  if (!event.turnId) return;
  const { summary, turns } = target;
  if (summary && (event.seq ?? 0) <= summary.throughSeq) return;
  // A prompt opens its turn; any other event belongs to a turn opened before it, most often the newest.
  const isPrompt = event.type === LogEventType.userMessage && !event.data.steer;
  let turn: ConversationIndex['turns'][number] | undefined;
  let at = turns.length - 1;
  for (; at >= 0 && !isPrompt; at--) {
    if (turns[at]!.turnId === event.turnId) {
      turn = turns[at];
      break;
    }
  }
  if (!turn) {
    // Before a summary, a turn begins with its prompt; after one, with whatever of it the summary left.
    if (!isPrompt && !summary) return;
    turn = { turnId: event.turnId, end: target.entries.length };
    turns.push(turn);
    at = turns.length - 1;
  }
  const message = toChatMessage(event);
  if (!message) return;
  const entry: ConversationEntry = { message, seq: event.seq ?? 0, tokens: UNCOUNTED };
  if (turn.end === target.entries.length) target.entries.push(entry);
  else target.entries.splice(turn.end, 0, entry);
  target.uncounted += 1;
  for (let later = at; later < turns.length; later++) turns[later]!.end += 1;
}

function countAt(target: ConversationIndex, at: number, counter: TokenCounter | undefined): number {
  const entry = target.entries[at]!;
  let count = entry.tokens;
  if (count === UNCOUNTED) {
    if (!counter) throw new Error('this transcript was created without a token counter');
    count = counter.countMessage(entry.message);
    entry.tokens = count;
    target.counted += count;
    target.uncounted -= 1;
  }
  return count;
}

function viewOf(target: ConversationIndex, currentTurnId: string | undefined, counter: TokenCounter | undefined): ConversationView {
  let length = target.entries.length;
  if (currentTurnId !== undefined) {
    for (let at = target.turns.length - 1; at >= 0; at--) {
      const turn = target.turns[at]!;
      if (turn.turnId === currentTurnId) {
        length = turn.end;
        break;
      }
    }
  }
  const check = (at: number) => {
    if (at < 0 || at >= length) throw new RangeError(`message ${at} is outside the conversation (${length} messages)`);
    return at;
  };
  return {
    summary: target.summary?.text,
    length,
    message: (at) => target.entries[check(at)]!.message,
    seq: (at) => target.entries[check(at)]!.seq,
    tokens: (at) => countAt(target, check(at), counter),
    totalTokens() {
      if (target.uncounted > 0) for (let at = 0; at < target.entries.length; at++) countAt(target, at, counter);
      // The running total covers every turn; take off the turns queued after this view.
      let total = target.counted;
      for (let at = length; at < target.entries.length; at++) total -= target.entries[at]!.tokens;
      return total;
    },
  };
}

function summarizeTurn(events: readonly LogEvent[], turnId: string, prompt: UnfinishedTurn['prompt']): UnfinishedTurn {
  let lastStep = 0;
  let lastCalls: readonly ToolCall[] = [];
  let text = '';
  let usage = ZERO_USAGE;
  let cost = 0;
  const answered = new Set<string>();
  const decisions: Record<string, ApprovalDecision> = {};
  for (const event of events) {
    if (event.turnId !== turnId) continue;
    if (event.type === LogEventType.assistantMessage) {
      lastStep = event.step ?? lastStep + 1;
      lastCalls = event.data.toolCalls;
      text = event.data.text;
      usage = addUsage(usage, event.data.usage);
      cost += event.data.cost;
    } else if (event.type === LogEventType.toolResult) {
      answered.add(event.data.toolCallId);
    } else if (event.type === LogEventType.approvalDecided) {
      decisions[event.data.toolCallId] =
        event.data.reason === undefined ? { approved: event.data.approved } : { approved: event.data.approved, reason: event.data.reason };
    }
  }
  return {
    turnId,
    prompt,
    lastStep,
    openCalls: lastCalls.filter((call) => !answered.has(call.id)),
    answered: lastStep > 0 && lastCalls.length === 0,
    text,
    usage,
    cost,
    decisions,
  };
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
