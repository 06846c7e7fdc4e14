import { LogEventType } from '../../src/protocol/index.ts';
import type { ChatMessage, LogEvent, ToolCall, Usage } from '../../src/protocol/index.ts';
import { ZERO_USAGE, addUsage } from '../../src/protocol/index.ts';
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

/** The in-memory view of one session's log. */
export interface Transcript {
  readonly events: readonly LogEvent[];
  readonly lastSeq: number;
  add(event: LogEvent): void;
  /**
   * The conversation as chat messages after the newest summary (`summary` is its text), turn by turn,
   * up to and including `currentTurnId`. `seqs[i]` is the log sequence of `messages[i]`.
   */
  conversation(currentTurnId?: string): { summary: string | undefined; messages: ChatMessage[]; seqs: number[] };
  /** Tool calls of a turn that have no `tool.result`. */
  openCalls(turnId: string): ToolCall[];
  /** Turns with a `user.message` and no `turn.ended`, oldest first. */
  unfinishedTurns(): UnfinishedTurn[];
}

/** Builds a transcript from events read back from the log (each with `seq`). */
export function createTranscript(initial: readonly LogEvent[] = []): Transcript {
  const events: LogEvent[] = [...initial];
  let lastSeq = initial.reduce((max, event) => Math.max(max, event.seq ?? 0), 0);

  return {
    get events() {
      return events;
    },
    get lastSeq() {
      return lastSeq;
    },
    add(event) {
      events.push(event);
      if (event.seq !== undefined) lastSeq = Math.max(lastSeq, event.seq);
    },
    conversation(currentTurnId) {
      let summary: { text: string; throughSeq: number } | undefined;
      for (let index = events.length - 1; index >= 0 && !summary; index--) {
        const event = events[index];
        if (event?.type === LogEventType.summaryCreated) summary = event.data;
      }
      // Prompts are logged when accepted, so a queued prompt may sit amid a running turn's events:
      // the conversation is ordered by turn, and stops at the current turn.
      const byTurn = new Map<string, LogEvent[]>();
      for (const event of events) {
        if (!event.turnId) continue;
        if (summary && (event.seq ?? 0) <= summary.throughSeq) continue;
        const isPrompt = event.type === LogEventType.userMessage && !event.data.steer;
        let turnEvents = byTurn.get(event.turnId);
        if (!turnEvents) {
          if (!isPrompt && !summary) continue;
          turnEvents = [];
          byTurn.set(event.turnId, turnEvents);
        }
        turnEvents.push(event);
      }
      const messages: ChatMessage[] = [];
      const seqs: number[] = [];
      for (const [turnId, turnEvents] of byTurn) {
        for (const event of turnEvents) {
          const message = toChatMessage(event);
          if (message) {
            messages.push(message);
            seqs.push(event.seq ?? 0);
          }
        }
        if (turnId === currentTurnId) break;
      }
      return { summary: summary?.text, messages, seqs };
    },
    openCalls(turnId) {
      const asked: ToolCall[] = [];
      const answered = new Set<string>();
      for (const event of events) {
        if (event.turnId !== turnId) continue;
        if (event.type === LogEventType.assistantMessage) asked.push(...event.data.toolCalls);
        if (event.type === LogEventType.toolResult) answered.add(event.data.toolCallId);
      }
      return asked.filter((call) => !answered.has(call.id));
    },
    unfinishedTurns() {
      const ended = new Set<string>();
      for (const event of events) if (event.type === LogEventType.turnEnded && event.turnId) ended.add(event.turnId);
      const turns: UnfinishedTurn[] = [];
      for (const event of events) {
        if (event.type !== LogEventType.userMessage || event.data.steer || !event.turnId || ended.has(event.turnId)) continue;
        turns.push(summarizeTurn(events, event.turnId, event.data));
      }
      return turns;
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
