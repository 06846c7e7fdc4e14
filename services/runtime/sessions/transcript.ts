import { LogEventType } from '../../../src/protocol/index.ts';
import type { LogEvent, ToolCall, Usage } from '../../../src/protocol/index.ts';
import { ZERO_USAGE, addUsage } from '../../../src/protocol/index.ts';
import type { TokenCounter } from '../../../src/tokens.ts';
import type { ApprovalDecision, GivenInput, InputRequest } from '../../../machines/index.ts';
import { TRIM_BELOW, createConversationIndex } from '../context/conversation.ts';
import type { ConversationIndex, ConversationView } from '../context/conversation.ts';

/** How a logged call went out: its `tool.use`. */
export interface SentCall {
  readonly args: unknown;
  readonly argsRewrittenBy?: readonly string[];
  /** The `args` are the hooks' final decision (false in an older runtime's log). */
  readonly final: boolean;
  /** The id its effect went out under; a repeat must use the same one (an older runtime built it another way). */
  readonly effectId: string;
}

/** One turn found in the log that has no `turn.ended`. */
export interface UnfinishedTurn {
  readonly turnId: string;
  readonly prompt: Extract<LogEvent, { type: 'user.message' }>['data'];
  /** When its prompt was logged (epoch ms): a deadline the log does not hold yet counts from then. */
  readonly acceptedAt: number;
  /** The deadline its `turn.started` logged, if it started. */
  readonly deadline?: number;
  /** Step of the newest assistant message, 0 when the model has not answered yet. */
  readonly lastStep: number;
  /** Tool calls of the newest assistant message without a result. */
  readonly openCalls: readonly ToolCall[];
  /**
   * Of the open calls, those whose `tool.use` was logged with no hook blocking them (they may have run): how each
   * went out, and whether those are the hooks' final `args` (`argsFinal`; false in an older runtime's log).
   */
  readonly sent: Readonly<Record<string, SentCall>>;
  /**
   * Of the open calls, those whose arguments the log holds only scrubbed (`argsRedacted`): the ones the call would go
   * out with now, its final `tool.use` args when it went out, else the model's. Such a call cannot be made again.
   */
  readonly argsRedacted: readonly string[];
  /** True when the newest assistant message asked for no tools: the turn had yielded. */
  readonly answered: boolean;
  /** True when that message was the last call at `maxSteps` (`finalAnswer`): the turn had run out of steps. */
  readonly answeredAtLast: boolean;
  readonly text: string;
  readonly usage: Usage;
  readonly cost: number;
  readonly decisions: Readonly<Record<string, ApprovalDecision>>;
  /**
   * Of the open calls, those that asked the user something (`tool.input_requested`): the answers given so far, and
   * the question still open (`asking`), if any.
   */
  readonly questions: Readonly<Record<string, { readonly given: readonly GivenInput[]; readonly asking?: InputRequest }>>;
}

/** The in-memory view of one session's log. */
export interface Transcript {
  readonly events: readonly LogEvent[];
  readonly lastSeq: number;
  add(event: LogEvent): void;
  /**
   * The conversation as chat messages, turn by turn (a prompt logged during another turn goes after that
   * turn), less the messages summaries replaced, up to and including `currentTurnId` (every turn when
   * absent). Kept up to date as events are added, so taking it costs O(turns queued after `currentTurnId`),
   * not O(history).
   */
  conversation(currentTurnId?: string): ConversationView;
  /** Events of one turn, in log order: a walk back from the newest event to the turn's prompt. */
  turnEvents(turnId: string): LogEvent[];
  /** Tool calls of a turn that have no `tool.result`. */
  openCalls(turnId: string): ToolCall[];
  /** Turns with a `user.message` and no `turn.ended`, oldest first. */
  unfinishedTurns(): UnfinishedTurn[];
  /**
   * For a session about to sit idle: drops the `turn.started` of turns that ended (only a turn still to run or
   * resume reads its own) and gives back the spare capacity of short lists.
   */
  trim(): void;
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
  /** How many `turn.started` the events hold (see `trim`). */
  private started = 0;
  /** Built on first use, then kept in step by `add`. */
  private index: ConversationIndex | undefined;
  private readonly counter: TokenCounter | undefined;

  constructor(initial: readonly LogEvent[], counter: TokenCounter | undefined) {
    this.events = [...initial];
    this.counter = counter;
    for (const event of initial) {
      if ((event.seq ?? 0) > this.lastSeq) this.lastSeq = event.seq ?? 0;
      if (event.type === LogEventType.turnStarted) this.started += 1;
    }
  }

  add(event: LogEvent): void {
    this.events.push(event);
    if (event.type === LogEventType.turnStarted) this.started += 1;
    if (event.seq !== undefined && event.seq > this.lastSeq) this.lastSeq = event.seq;
    this.index?.add(event);
  }

  conversation(currentTurnId?: string): ConversationView {
    this.index ??= createConversationIndex(this.events, this.counter);
    return this.index.view(currentTurnId);
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
    // A result answers the oldest open call of its id: models that reuse ids (`call_0` in every response) ask for
    // one id in several steps, and step 1's result must not close step 2's call.
    const open: ToolCall[] = [];
    for (const event of this.turnEvents(turnId)) {
      if (event.type === LogEventType.assistantMessage) open.push(...event.data.toolCalls);
      if (event.type === LogEventType.toolResult) {
        const at = open.findIndex((call) => call.id === event.data.toolCallId);
        if (at >= 0) open.splice(at, 1);
      }
    }
    return open;
  }

  trim(): void {
    const { events } = this;
    if (this.started > 0) {
      const ended = new Set<string | undefined>();
      for (const event of events) if (event.type === LogEventType.turnEnded) ended.add(event.turnId);
      // A new list, exact in size: a list grown by push keeps room for ~17 entries, which an idle session need not.
      this.events = events.filter((event) => event.type !== LogEventType.turnStarted || !ended.has(event.turnId));
      this.started = this.events.length - events.length + this.started;
    } else if (events.length < TRIM_BELOW) {
      this.events = events.slice();
    }
    this.index?.trim();
  }

  unfinishedTurns(): UnfinishedTurn[] {
    const { events } = this;
    const ended = new Set<string>();
    for (const event of events) if (event.type === LogEventType.turnEnded && event.turnId) ended.add(event.turnId);
    const turns: UnfinishedTurn[] = [];
    for (const event of events) {
      if (event.type !== LogEventType.userMessage || event.data.steer || !event.turnId || ended.has(event.turnId)) continue;
      turns.push(summarizeTurn(events, event.turnId, event.data, event.ts));
    }
    return turns;
  }
}

function summarizeTurn(events: readonly LogEvent[], turnId: string, prompt: UnfinishedTurn['prompt'], acceptedAt: number): UnfinishedTurn {
  let deadline: number | undefined;
  let lastStep = 0;
  let lastCalls: readonly ToolCall[] = [];
  let atLast = false;
  let text = '';
  let usage = ZERO_USAGE;
  let cost = 0;
  // Results, sends and decisions of the newest step only: models that reuse ids (`call_0` in every response) ask
  // for one id in several steps, and an earlier step's result or approval must not stand for the newest one's.
  let answered = new Set<string>();
  let decisions: Record<string, ApprovalDecision> = {};
  let sent: Record<string, SentCall> = {};
  let sentRedacted = new Set<string>();
  let askedRedacted: ReadonlySet<string> = new Set();
  let questions: Record<string, { given: GivenInput[]; asking?: InputRequest }> = {};
  for (const event of events) {
    if (event.turnId !== turnId) continue;
    // An agent call's child turn is counted in its caller's, whichever step it was.
    if (event.type === LogEventType.toolResult && event.data.cost !== undefined) {
      cost += event.data.cost;
      if (event.data.usage) usage = addUsage(usage, event.data.usage);
    }
    if (event.type === LogEventType.turnStarted) {
      deadline ??= event.data.deadline;
    } else if (event.type === LogEventType.summaryCreated) {
      // A summary call's usage and cost are the turn's too.
      if (event.data.usage) usage = addUsage(usage, event.data.usage);
      cost += event.data.cost ?? 0;
    } else if (event.type === LogEventType.assistantMessage) {
      answered = new Set();
      decisions = {};
      sent = {};
      sentRedacted = new Set();
      questions = {};
      lastStep = event.step ?? lastStep + 1;
      lastCalls = event.data.toolCalls;
      atLast = event.data.finalAnswer === true;
      askedRedacted = new Set(event.data.argsRedacted);
      text = event.data.text;
      usage = addUsage(usage, event.data.usage);
      cost += event.data.cost;
    } else if (event.step !== undefined && event.step !== lastStep) {
      // An event of an earlier step logged late (events without a step, from an older runtime, go by log order).
      continue;
    } else if (event.type === LogEventType.toolResult) {
      answered.add(event.data.toolCallId);
    } else if (event.type === LogEventType.toolUse && event.data.blockedBy === undefined) {
      const { args, argsRewrittenBy, effectId } = event.data;
      const final = event.data.argsFinal === true;
      sent[event.data.toolCallId] = argsRewrittenBy === undefined ? { args, final, effectId } : { args, argsRewrittenBy, final, effectId };
      if (event.data.argsRedacted === true) sentRedacted.add(event.data.toolCallId);
    } else if (event.type === LogEventType.approvalDecided) {
      const { toolCallId: _id, ...decision } = event.data;
      decisions[event.data.toolCallId] = decision;
    } else if (event.type === LogEventType.toolInputRequested) {
      const { requestId, question, schema } = event.data;
      const asked = (questions[event.data.toolCallId] ??= { given: [] });
      asked.asking = schema === undefined ? { requestId, question } : { requestId, question, schema };
    } else if (event.type === LogEventType.toolInputAnswered) {
      const asked = questions[event.data.toolCallId];
      if (asked?.asking?.requestId === event.data.requestId) {
        asked.given.push({ requestId: event.data.requestId, question: asked.asking.question, answer: event.data.answer });
        delete asked.asking;
      }
    }
  }
  const open = lastCalls.filter((call) => !answered.has(call.id));
  // A call that went out with the hooks' final args is sent again with those; any other with the model's.
  const redacted = (id: string) => (sent[id]?.final === true ? sentRedacted.has(id) : askedRedacted.has(id));
  return {
    turnId,
    prompt,
    acceptedAt,
    ...(deadline === undefined ? {} : { deadline }),
    lastStep,
    openCalls: open,
    argsRedacted: open.filter((call) => redacted(call.id)).map((call) => call.id),
    sent: Object.fromEntries(lastCalls.filter((call) => !answered.has(call.id) && sent[call.id] !== undefined).map((call) => [call.id, sent[call.id]!])),
    answered: lastStep > 0 && lastCalls.length === 0,
    answeredAtLast: atLast,
    text,
    usage,
    cost,
    decisions,
    questions: Object.fromEntries(open.filter((call) => questions[call.id] !== undefined).map((call) => [call.id, questions[call.id]!])),
  };
}
