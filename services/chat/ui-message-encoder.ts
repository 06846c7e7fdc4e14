import { ErrorCode } from '../../src/errors.ts';
import { LiveEventType, LogEventType, TurnEndReason } from '../../src/protocol/index.ts';
import type { AgentEvent } from '../../src/protocol/index.ts';

// One agentbus turn as the Vercel AI SDK's UI message stream (the chunks `useChat` reads; ai 6, protocol v1). Pure.

/** One chunk of the UI message stream: the JSON of one SSE `data:` line. */
export type UiChunk = { readonly type: string } & Readonly<Record<string, unknown>>;

/** How a turn's end closes the stream. */
const FINISH_REASON: Readonly<Record<string, string>> = {
  [TurnEndReason.yielded]: 'stop',
  [TurnEndReason.budgetExceeded]: 'length',
  [TurnEndReason.failed]: 'error',
  [TurnEndReason.timeout]: 'error',
  [TurnEndReason.deadlineExceeded]: 'error',
  [TurnEndReason.cancelled]: 'other',
};

/** What the encoder knows of one step's text: how much the deltas covered, how much went out, and its part. */
interface StepText {
  covered: number;
  sent: number;
  open: boolean;
  closed: boolean;
  /** Answers of later calls in the same step (an output retry, the last answer at maxSteps), each a part of its own. */
  later: number;
}

/** Encodes one turn's events, in the order a watch hands them out, into UI message chunks. */
export interface UiMessageEncoder {
  /** The chunks this event adds (none for another turn's events, or for what was already sent). */
  push(event: AgentEvent): UiChunk[];
  /** True once `turn.ended` was encoded (or the stream paused): the stream is complete. */
  readonly finished: boolean;
  /**
   * What the turn waits for a human on, as far as the events pushed tell: the tool calls whose approval was requested
   * and not yet decided, and the requests (`requestId`) of tools' questions not yet answered.
   */
  readonly awaitingHuman: readonly string[];
  /**
   * Ends the stream where the turn waits for a human: the step closes and `finish` (reason `tool-calls`, metadata
   * `{ reason: 'awaiting_approval' }`, or `'awaiting_input'` when only questions are open) goes out, as the AI SDK's
   * own servers end a response at a tool approval. `useChat` sends approval responses (and a page its answers) only
   * once a stream has finished; they come back as a new request, whose stream goes on with the same message.
   * Nothing once finished.
   */
  pause(): UiChunk[];
}

/**
 * The UI message stream of one turn (`messageId` = the turn id; `toolCallsShown`: calls whose input the client has
 * already, as in a stream that goes on after approvals, so that their parts are updated rather than added): `start`; per step `start-step`, the step's text as
 * `text-start`/`text-delta`/`text-end` (part id `text-<step>`), its tool calls as dynamic tool parts
 * (`tool-input-available`, then `tool-output-available`, `tool-output-error` or `tool-output-denied`), an awaited
 * approval as `tool-approval-request` (the approval id is the tool call id), a tool's question as a
 * `data-agentbus-question` part and its answer as `data-agentbus-answer` (both with the request id as part id; the UI
 * message stream has no question part of its own), `finish-step`; then on `turn.ended` an `error` chunk for a turn
 * that failed, an `abort` for one cancelled, and `finish` with the turn's reason, usage, cost and typed `output` as
 * `messageMetadata`.
 *
 * The log and the live stream are not ordered with each other, and a stream resumed from the log has no deltas of
 * finished steps: a step's text is sent from its deltas as they come, and whatever `assistant.message` holds beyond
 * what they covered is sent when it comes; deltas past the step's end are dropped. Each piece of text goes out
 * once, whichever stream brings it first.
 */
export function createUiMessageEncoder(turnId: string, options: { readonly toolCallsShown?: readonly string[] } = {}): UiMessageEncoder {
  let started = false;
  let finished = false;
  let step: number | undefined;
  const awaiting = new Set<string>();
  // Open questions: requestId → the call that asked (a result of that call, a timeout, closes them too).
  const questions = new Map<string, string>();
  const closeQuestionsOf = (toolCallId: string) => {
    for (const [requestId, caller] of questions) if (caller === toolCallId) questions.delete(requestId);
  };
  // Tool calls whose input went out: a privileged call's comes with its approval request, before its `tool.use`.
  const inputs = new Set<string>(options.toolCallsShown ?? []);
  const sendInput = (toolCallId: string, toolName: string, input: unknown, out: UiChunk[]) => {
    if (inputs.has(toolCallId)) return;
    inputs.add(toolCallId);
    out.push({ type: 'tool-input-available', toolCallId, toolName, input: input ?? {}, dynamic: true });
  };
  const texts = new Map<number, StepText>();
  const textOf = (index: number): StepText => {
    let text = texts.get(index);
    if (!text) texts.set(index, (text = { covered: 0, sent: 0, open: false, closed: false, later: 0 }));
    return text;
  };
  const closeText = (index: number, out: UiChunk[]) => {
    const text = textOf(index);
    if (text.open && !text.closed) out.push({ type: 'text-end', id: `text-${index}` });
    text.closed = true;
  };
  const enterStep = (index: number, out: UiChunk[]) => {
    // Steps only move forward: a late event of an earlier step (the two streams race) goes out within the current one.
    if (step !== undefined && index <= step) return;
    if (step !== undefined) {
      closeText(step, out);
      out.push({ type: 'finish-step' });
    }
    step = index;
    out.push({ type: 'start-step' });
  };
  const sendText = (index: number, upTo: number, whole: string, out: UiChunk[]) => {
    const text = textOf(index);
    if (upTo <= text.sent) return;
    if (!text.open) {
      text.open = true;
      out.push({ type: 'text-start', id: `text-${index}` });
    }
    out.push({ type: 'text-delta', id: `text-${index}`, delta: whole.slice(whole.length - (upTo - text.sent)) });
    text.sent = upTo;
  };

  return {
    get finished() {
      return finished;
    },
    get awaitingHuman() {
      return [...awaiting, ...questions.keys()];
    },
    pause() {
      if (finished) return [];
      const out: UiChunk[] = [];
      if (step !== undefined) {
        closeText(step, out);
        out.push({ type: 'finish-step' });
      }
      const reason = awaiting.size === 0 && questions.size > 0 ? 'awaiting_input' : 'awaiting_approval';
      out.push({ type: 'finish', finishReason: 'tool-calls', messageMetadata: { reason } });
      finished = true;
      return out;
    },
    push(event) {
      if (finished || event.turnId !== turnId) return [];
      const out: UiChunk[] = [];
      if (!started) {
        started = true;
        out.push({ type: 'start', messageId: turnId });
      }
      const index = event.step ?? step ?? 0;
      switch (event.type) {
        case LiveEventType.assistantDelta: {
          const text = textOf(index);
          if (text.closed || event.data.text === '') break;
          enterStep(index, out);
          text.covered += event.data.text.length;
          sendText(index, text.covered, event.data.text, out);
          break;
        }
        case LogEventType.assistantMessage: {
          enterStep(index, out);
          const text = textOf(index);
          if (!text.closed) {
            sendText(index, event.data.text.length, event.data.text, out);
            closeText(index, out);
          } else if (event.data.text !== '') {
            // Another call's answer in a step whose text is closed: whole, as a part of its own (its deltas were
            // dropped, as they cannot be told from the first call's).
            const id = `text-${index}-${++text.later}`;
            out.push({ type: 'text-start', id }, { type: 'text-delta', id, delta: event.data.text }, { type: 'text-end', id });
          }
          break;
        }
        case LogEventType.toolUse:
          enterStep(index, out);
          sendInput(event.data.toolCallId, event.data.name, event.data.args, out);
          break;
        case LogEventType.approvalRequested:
          enterStep(index, out);
          sendInput(event.data.toolCallId, event.data.name, event.data.args, out);
          out.push({ type: 'tool-approval-request', approvalId: event.data.toolCallId, toolCallId: event.data.toolCallId });
          awaiting.add(event.data.toolCallId);
          break;
        case LogEventType.approvalDecided:
          awaiting.delete(event.data.toolCallId);
          break;
        case LogEventType.toolInputRequested: {
          enterStep(index, out);
          const { toolCallId, requestId, question, schema } = event.data;
          out.push({ type: 'data-agentbus-question', id: requestId, data: { toolCallId, requestId, question, ...(schema ? { schema } : {}) } });
          questions.set(requestId, toolCallId);
          break;
        }
        case LogEventType.toolInputAnswered: {
          enterStep(index, out);
          const { toolCallId, requestId, answer } = event.data;
          out.push({ type: 'data-agentbus-answer', id: requestId, data: { toolCallId, requestId, answer } });
          questions.delete(requestId);
          break;
        }
        case LogEventType.toolResult: {
          enterStep(index, out);
          const { toolCallId } = event.data;
          awaiting.delete(toolCallId);
          closeQuestionsOf(toolCallId);
          if (event.data.isError && event.data.error?.code === ErrorCode.denied) out.push({ type: 'tool-output-denied', toolCallId });
          else if (event.data.isError) out.push({ type: 'tool-output-error', toolCallId, errorText: event.data.output || event.data.error?.message || 'the tool failed', dynamic: true });
          else out.push({ type: 'tool-output-available', toolCallId, output: event.data.output, dynamic: true });
          break;
        }
        case LogEventType.turnEnded: {
          if (step !== undefined) {
            closeText(step, out);
            out.push({ type: 'finish-step' });
          }
          const { reason, error, usage, cost, steps, output } = event.data;
          if (reason === TurnEndReason.cancelled) out.push({ type: 'abort', reason: error?.message ?? 'the turn was cancelled' });
          else if (reason !== TurnEndReason.yielded) out.push({ type: 'error', errorText: error?.message ?? `the turn ended ${reason}` });
          out.push({ type: 'finish', finishReason: FINISH_REASON[reason] ?? 'other', messageMetadata: { reason, usage, cost, steps, ...(output !== undefined ? { output } : {}), ...(error ? { error } : {}) } });
          finished = true;
          break;
        }
        default:
          break;
      }
      return out;
    },
  };
}
