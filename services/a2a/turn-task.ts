import { Role, TaskState } from '@a2a-js/sdk';
import type { Artifact, Message, Part, Task } from '@a2a-js/sdk';
import { LogEventType, TurnEndReason } from '../../src/protocol/index.ts';
import type { AgentEvent, LogEvent } from '../../src/protocol/index.ts';

// How agentbus turns become A2A tasks (docs/protocol.md, "A2A"): a context is a session, a task one turn of it, its id
// `<sessionId>.<turnId>`. Everything here is read from the session's log events, so a restarted server (or another
// instance) tells the same task from the log alone. Pure: no I/O.

/** The artifact that holds a turn's answer. */
export const ANSWER_ARTIFACT_ID = 'answer';

/** The separator of a task id's two parts: no session id or turn id holds a dot. */
const TASK_ID_SEPARATOR = '.';

/** The task id of a turn: `<sessionId>.<turnId>`. */
export function taskIdOf(sessionId: string, turnId: string): string {
  return `${sessionId}${TASK_ID_SEPARATOR}${turnId}`;
}

/** The session and turn a task id names, or undefined when it names none. */
export function parseTaskId(taskId: string): { sessionId: string; turnId: string } | undefined {
  const parts = taskId.split(TASK_ID_SEPARATOR);
  if (parts.length !== 2) return undefined;
  const [sessionId, turnId] = parts as [string, string];
  return /^[A-Za-z0-9_-]{1,64}$/.test(sessionId) && /^[A-Za-z0-9_-]{1,64}$/.test(turnId) ? { sessionId, turnId } : undefined;
}

/** One turn as its log events tell it. */
export interface TurnRecord {
  readonly sessionId: string;
  readonly turnId: string;
  /** The prompt (the turn's first `user.message`). */
  readonly prompt: Extract<LogEvent, { type: 'user.message' }>;
  /** True once the runtime began the turn (any event after the prompt). */
  readonly started: boolean;
  readonly ended?: Extract<LogEvent, { type: 'turn.ended' }>;
  /** Epoch ms of its newest event: the status timestamp. */
  readonly lastTs: number;
  /** What the running turn waits for a human on, oldest first: approvals requested and tools' questions still open. */
  readonly awaiting?: readonly HumanWait[];
}

/** One open wait for a human: the tool call, the event that asked (its id is the status message's), what it asks. */
export interface HumanWait {
  readonly toolCallId: string;
  readonly eventId: string;
  readonly text: string;
}

/** The open waits after `event`: an approval request or a question opens one; a decision, an answer or the call's result closes it. */
function waitsAfter(awaiting: readonly HumanWait[], event: AgentEvent | LogEvent): readonly HumanWait[] {
  switch (event.type) {
    case LogEventType.approvalRequested:
      return [...awaiting.filter((wait) => wait.toolCallId !== event.data.toolCallId), { toolCallId: event.data.toolCallId, eventId: event.id, text: `May I call ${event.data.name} (tool call ${event.data.toolCallId})? It awaits approval.` }];
    case LogEventType.toolInputRequested:
      return [...awaiting.filter((wait) => wait.toolCallId !== event.data.toolCallId), { toolCallId: event.data.toolCallId, eventId: event.id, text: event.data.question }];
    case LogEventType.approvalDecided:
    case LogEventType.toolInputAnswered:
    case LogEventType.toolResult:
      return awaiting.filter((wait) => wait.toolCallId !== event.data.toolCallId);
    default:
      return awaiting;
  }
}

/** A turn's record, built up one event at a time: the prompt first; other turns' events are ignored. */
export function recordEvent(record: TurnRecord | undefined, event: AgentEvent | LogEvent): TurnRecord | undefined {
  if (event.turnId === undefined) return record;
  if (record === undefined) {
    if (event.type !== LogEventType.userMessage) return undefined;
    return { sessionId: event.sessionId, turnId: event.turnId, prompt: event as TurnRecord['prompt'], started: false, lastTs: event.ts };
  }
  if (event.turnId !== record.turnId || record.ended) return record;
  const lastTs = Math.max(record.lastTs, event.ts);
  if (event.type === LogEventType.turnEnded) return { ...record, started: true, ended: event as TurnRecord['ended'] & object, lastTs };
  if (event.type === LogEventType.userMessage) return { ...record, lastTs };
  const awaiting = waitsAfter(record.awaiting ?? [], event);
  return { ...record, started: true, lastTs, ...(awaiting.length > 0 ? { awaiting } : { awaiting: undefined }) };
}

/** Every turn of a session's log, in the order they were prompted. Live events are skipped. */
export function turnsOf(events: readonly LogEvent[]): TurnRecord[] {
  const turns = new Map<string, TurnRecord>();
  for (const event of events) {
    if (event.turnId === undefined) continue;
    const next = recordEvent(turns.get(event.turnId), event);
    if (next) turns.set(event.turnId, next);
  }
  return [...turns.values()];
}

/** The A2A state of a turn: queued → SUBMITTED, running → WORKING (INPUT_REQUIRED while it waits for a human), then by how it ended. */
export function stateOf(record: TurnRecord): TaskState {
  if (!record.ended && (record.awaiting?.length ?? 0) > 0) return TaskState.TASK_STATE_INPUT_REQUIRED;
  if (!record.ended) return record.started ? TaskState.TASK_STATE_WORKING : TaskState.TASK_STATE_SUBMITTED;
  switch (record.ended.data.reason) {
    case TurnEndReason.yielded:
      return TaskState.TASK_STATE_COMPLETED;
    case TurnEndReason.cancelled:
      return TaskState.TASK_STATE_CANCELED;
    default:
      return TaskState.TASK_STATE_FAILED;
  }
}

/** True for COMPLETED, FAILED, CANCELED and REJECTED: a task that changes no more. */
export function isTerminal(state: TaskState): boolean {
  return state === TaskState.TASK_STATE_COMPLETED || state === TaskState.TASK_STATE_FAILED || state === TaskState.TASK_STATE_CANCELED || state === TaskState.TASK_STATE_REJECTED;
}

/** A text part. */
export function textPart(text: string): Part {
  return { content: { $case: 'text', value: text }, metadata: undefined, filename: '', mediaType: 'text/plain' };
}

/** A data part: a JSON value. */
export function dataPart(value: unknown): Part {
  return { content: { $case: 'data', value }, metadata: undefined, filename: '', mediaType: 'application/json' };
}

function message(role: Role, messageId: string, record: TurnRecord, text: string): Message {
  return {
    messageId,
    contextId: record.sessionId,
    taskId: taskIdOf(record.sessionId, record.turnId),
    role,
    parts: [textPart(text)],
    metadata: undefined,
    extensions: [],
    referenceTaskIds: [],
  };
}

/** The caller's message as the log holds it: its A2A `messageId` when it came through A2A, else the event's id. */
export function userMessageOf(record: TurnRecord): Message {
  const a2a = record.prompt.data.metadata?.['a2a'] as { messageId?: unknown } | undefined;
  const messageId = typeof a2a?.messageId === 'string' ? a2a.messageId : record.prompt.id;
  return message(Role.ROLE_USER, messageId, record, record.prompt.data.text);
}

/**
 * The agent's closing message: the answer of a completed turn, or why it did not complete; for a turn waiting for a
 * human, what it asks (the newest question or approval request).
 */
export function agentMessageOf(record: TurnRecord): Message | undefined {
  const ended = record.ended;
  const asking = record.awaiting?.at(-1);
  if (!ended && asking) return message(Role.ROLE_AGENT, asking.eventId, record, asking.text);
  if (!ended) return undefined;
  const { reason, text, error } = ended.data;
  const said = reason === TurnEndReason.yielded ? (text ?? '') : (error?.message ?? `the turn ended: ${reason}`);
  return message(Role.ROLE_AGENT, ended.id, record, said);
}

/** The answer's artifact: the final text of a turn that yielded with one, and its typed `output` as a data part. */
export function answerArtifact(text: string, output?: unknown): Artifact {
  const parts = [...(text !== '' || output === undefined ? [textPart(text)] : []), ...(output === undefined ? [] : [dataPart(output)])];
  return { artifactId: ANSWER_ARTIFACT_ID, name: 'answer', description: '', parts, metadata: undefined, extensions: [] };
}

/** The answer artifact of a turn that yielded with text or a typed output; none otherwise. */
export function finalArtifactOf(record: TurnRecord): Artifact | undefined {
  const ended = record.ended?.data;
  if (ended?.reason !== TurnEndReason.yielded || (!ended.text && ended.output === undefined)) return undefined;
  return answerArtifact(ended.text ?? '', ended.output);
}

/** What a task shows of its turn: history length (undefined = all, 0 = none) and whether artifacts are included. */
export interface TaskView {
  readonly historyLength?: number | undefined;
  readonly includeArtifacts?: boolean;
}

/**
 * The A2A task of a turn: its state, its status message and timestamp, its history (the prompt, then the agent's
 * closing message, or what it asks while it waits for a human), the answer as an artifact (a typed output as its data part), and the agentbus facts (tenant-free: session, turn, reason, usage,
 * cost, steps) under `metadata.agentbus`.
 */
export function taskOf(record: TurnRecord, view: TaskView = {}): Task {
  const state = stateOf(record);
  const closing = agentMessageOf(record);
  const history = [userMessageOf(record), ...(closing ? [closing] : [])];
  const shown = view.historyLength === undefined ? history : view.historyLength <= 0 ? [] : history.slice(-view.historyLength);
  const final = finalArtifactOf(record);
  const answer = final ? [final] : [];
  const ended = record.ended?.data;
  return {
    id: taskIdOf(record.sessionId, record.turnId),
    contextId: record.sessionId,
    status: { state, message: closing, timestamp: new Date(record.lastTs).toISOString() },
    artifacts: view.includeArtifacts === false ? [] : answer,
    history: shown,
    metadata: {
      agentbus: {
        sessionId: record.sessionId,
        turnId: record.turnId,
        ...(ended ? { reason: ended.reason, steps: ended.steps, cost: ended.cost, usage: ended.usage, ...(ended.error ? { error: ended.error } : {}) } : {}),
      },
    },
  };
}
