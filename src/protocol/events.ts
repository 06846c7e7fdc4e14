import type { ErrorData } from '../errors.ts';
import type { ChatMessage, ToolCall, ToolSpec, Usage } from './messages.ts';
import type { TraceContext } from './trace-context.ts';
import type { ParentCall } from './schemas.ts';

/** Safety tiers of a tool. */
export const SafetyTier = {
  readOnly: 'read_only',
  sideEffecting: 'side_effecting',
  privileged: 'privileged',
} as const;
export type SafetyTier = (typeof SafetyTier)[keyof typeof SafetyTier];

/** How a turn ended. */
export const TurnEndReason = {
  yielded: 'yielded',
  cancelled: 'cancelled',
  budgetExceeded: 'budget_exceeded',
  failed: 'failed',
  timeout: 'timeout',
  /** The turn's own deadline passed (`deadlineMs`, or the runtime's default); what was in flight was cancelled. */
  deadlineExceeded: 'deadline_exceeded',
} as const;
export type TurnEndReason = (typeof TurnEndReason)[keyof typeof TurnEndReason];

/** The turn machine's states. */
export const RunState = {
  preparing: 'Preparing',
  streaming: 'Streaming',
  toolExecution: 'ToolExecution',
  awaitingApproval: 'AwaitingApproval',
  compacting: 'Compacting',
  yielding: 'Yielding',
  cancelled: 'Cancelled',
  budgetExceeded: 'BudgetExceeded',
  failed: 'Failed',
} as const;
export type RunState = (typeof RunState)[keyof typeof RunState];

/** Durable event types, appended to the session log. */
export const LogEventType = {
  sessionCreated: 'session.created',
  /** A fork's second event: its history starts with its parent's log up to `parentSeq` (read by reference, not copied). */
  sessionForked: 'session.forked',
  userMessage: 'user.message',
  turnStarted: 'turn.started',
  assistantMessage: 'assistant.message',
  toolUse: 'tool.use',
  toolResult: 'tool.result',
  approvalRequested: 'approval.requested',
  approvalDecided: 'approval.decided',
  /** A running call asked the user a question and is suspended until the answer (`tool.input_answered`). */
  toolInputRequested: 'tool.input_requested',
  toolInputAnswered: 'tool.input_answered',
  summaryCreated: 'summary.created',
  summaryFailed: 'summary.failed',
  turnEnded: 'turn.ended',
  /** The rest of the turn runs as another agent profile (a `handoff__<name>` call). */
  turnHandoff: 'turn.handoff',
} as const;
export type LogEventType = (typeof LogEventType)[keyof typeof LogEventType];

/** Ephemeral event types, published on `live.<type>`. */
export const LiveEventType = {
  assistantDelta: 'assistant.delta',
  toolProgress: 'tool.progress',
  progress: 'progress',
  state: 'state',
  retry: 'retry',
  error: 'error',
  requestPrepared: 'request.prepared',
} as const;
export type LiveEventType = (typeof LiveEventType)[keyof typeof LiveEventType];

/** The data of each event type. */
export interface EventDataMap {
  'session.created': {
    readonly createdBy: string;
    /** Set for a child session: the call of another session (same tenant) that started it. */
    readonly parent?: ParentCall;
  };
  /**
   * The session is a fork: its history is `parentSessionId`'s history (its own inherited part included) up to and
   * including the event at stream sequence `parentSeq`, then its own events.
   */
  'session.forked': { readonly parentSessionId: string; readonly parentSeq: number; readonly forkedBy: string };
  'user.message': {
    readonly text: string;
    readonly model?: string;
    /** Fallback models, tried in order after `model`. */
    readonly models?: readonly string[];
    readonly smallModel?: string;
    readonly largeModel?: string;
    /** Start on `largeModel` at once. */
    readonly complex?: boolean;
    readonly maxSteps?: number;
    readonly maxCost?: number;
    /** The turn's deadline, in milliseconds from the prompt's acceptance. */
    readonly deadlineMs?: number;
    /** False: at `maxSteps` the turn ends without the last call that asks the model to answer from what it has. */
    readonly finalAnswer?: boolean;
    readonly metadata?: Record<string, unknown>;
    /** True for a message injected into a running turn by `steer`. */
    readonly steer?: boolean;
    /** The files the prompt attached (their content is in `text`, after the prompt's own). */
    readonly files?: readonly { readonly name: string; readonly chars: number }[];
    /** The first step makes this call without asking the model. */
    readonly forceTool?: { readonly name: string; readonly args: unknown };
    /** The first step is offered no tools. */
    readonly forceFinish?: boolean;
    /** The JSON Schema the turn's final answer must match: it is delivered parsed as `turn.ended.data.output`. */
    readonly outputSchema?: Record<string, unknown>;
    /**
     * True (with `steer`) for the runtime's own message after a final answer that did not match the turn's
     * `outputSchema`: the validation error, asking once for a corrected answer.
     */
    readonly outputRetry?: boolean;
    /**
     * The request that sent it (its reply subject), when it was a request: a node that takes over a session
     * whose holder died hands it the messages it kept, and one found here is not run twice.
     */
    readonly requestId?: string;
    /** The trace context the prompt arrived with (its `traceparent` header), when tracing is on: the turn's trace joins it. */
    readonly trace?: TraceContext;
    /** The agent profile the turn runs as. */
    readonly profile?: string;
    /** Set when the prompt came from another session's agent call. */
    readonly parent?: ParentCall;
  };
  /** The first event of each turn (after its prompt): what it runs with. A resumed turn keeps the one logged. */
  'turn.started': {
    readonly model: string;
    /** Fallback models, in order after `model`. */
    readonly models?: readonly string[];
    readonly maxSteps: number;
    readonly maxCost?: number;
    /** Epoch milliseconds past which the turn ends `deadline_exceeded`: the prompt's acceptance plus its deadline. */
    readonly deadline: number;
    /** Whether a last call without tools answers when `maxSteps` runs out. */
    readonly finalAnswer: boolean;
    /** The context of the turn's own span, when tracing is on: a turn resumed on another node continues that trace. */
    readonly trace?: TraceContext;
  };
  'assistant.message': {
    readonly text: string;
    readonly toolCalls: readonly ToolCall[];
    readonly usage: Usage;
    readonly cost: number;
    /** The model that answered. */
    readonly model: string;
    readonly finishReason: string;
    /** Milliseconds from the provider request to its last chunk (of the attempt that answered). */
    readonly latencyMs?: number;
    /** Milliseconds from the provider request to its first text or tool call; absent when none came. */
    readonly firstTokenMs?: number;
    /** True for the last call at `maxSteps`, made without tools: its text is the turn's answer. */
    readonly finalAnswer?: boolean;
    /** Why this answer did not match the turn's `outputSchema` (not JSON, or the validation errors); absent when it did or there is none. */
    readonly outputError?: string;
    /**
     * Ids of the tool calls whose `args` held a secret and are logged scrubbed (the call went out with the real
     * ones, kept in memory): a turn resumed from the log does not make such a call. Absent when none did.
     */
    readonly argsRedacted?: readonly string[];
    /** True when no model was asked: the prompt's `forceTool` made the call. */
    readonly forced?: boolean;
  };
  'tool.use': {
    readonly toolCallId: string;
    readonly effectId: string;
    readonly name: string;
    /** The arguments sent to the worker: the model's (in `assistant.message`), or a before-hook's rewrite. */
    readonly args: unknown;
    readonly tier: SafetyTier | 'unknown';
    /** The before-hooks that replaced the arguments, in order; absent when none did. */
    readonly argsRewrittenBy?: readonly string[];
    /** The before-hook that blocked the call: it was sent to no worker (its `tool.result` names the hook too). */
    readonly blockedBy?: string;
    /**
     * True when `args` are the before-hooks' final decision (none configured counts) and `blockedBy` is set iff
     * one blocked the call: a resumed turn sends the call again with these `args` without asking the hooks again.
     * Absent in logs of older runtimes, whose blocked calls were not marked: their hooks are asked again.
     */
    readonly argsFinal?: boolean;
    /** True when `args` held a secret and are logged scrubbed; the worker got the real ones. Absent otherwise. */
    readonly argsRedacted?: boolean;
    /** An agent call (`agent__<name>`): the child session it runs in (derived from `effectId`). */
    readonly childSessionId?: string;
  };
  'tool.result': {
    readonly toolCallId: string;
    readonly name: string;
    readonly output: string;
    readonly isError: boolean;
    readonly error?: ErrorData;
    readonly durationMs: number;
    /** The before-hook that blocked the call (it reached no worker; `output` is the hook's, or its failure). */
    readonly blockedBy?: string;
    /** The after-hooks that replaced the output or changed `isError`, in order. */
    readonly outputRewrittenBy?: readonly string[];
    /** An agent call (`agent__<name>`): the child session and turn that answered. */
    readonly child?: { readonly sessionId: string; readonly turnId: string };
    /** An agent call: the child turn's usage and cost, counted in this turn's. */
    readonly usage?: Usage;
    readonly cost?: number;
  };
  /** A `handoff__<name>` call: the turn's following steps run as profile `to` (system prompt, model, tools). */
  'turn.handoff': { readonly toolCallId: string; readonly to: string; readonly from?: string };
  'approval.requested': {
    readonly toolCallId: string;
    readonly name: string;
    readonly args: unknown;
    /** True when `args` held a secret and are shown scrubbed; the call, once approved, goes out with the real ones. */
    readonly argsRedacted?: boolean;
    /** Epoch ms after which nobody's decision is taken and `onTimeout` is logged instead (absent in older logs). */
    readonly deadline?: number;
    /** The decision logged when the deadline passes (`approval.decided` with `timedOut: true`). */
    readonly onTimeout?: 'deny' | 'approve';
  };
  /**
   * A decision on a privileged call. `args`: approved with these arguments instead of the model's (which stay in
   * `assistant.message` and `approval.requested`). `respond`: the call's result, given in the tool's place (the tool
   * does not run; `approved` is false). `timedOut`: nobody decided before the deadline; this is the default.
   */
  'approval.decided': {
    readonly toolCallId: string;
    readonly approved: boolean;
    readonly reason?: string;
    readonly args?: unknown;
    readonly respond?: string;
    readonly timedOut?: boolean;
  };
  /**
   * A running call asked the user something (its worker replied `input_required`). `requestId` is
   * `<toolCallId>:<n>`; `schema`, when set, is the JSON Schema the answer must match; past `deadline` (epoch ms) the
   * call ends with a `timeout` error result.
   */
  'tool.input_requested': {
    readonly toolCallId: string;
    readonly name: string;
    readonly requestId: string;
    readonly question: string;
    readonly schema?: Readonly<Record<string, unknown>>;
    readonly deadline: number;
  };
  /** The user's answer to a `tool.input_requested`; the call is then made again with it (same `effectId`). */
  'tool.input_answered': { readonly toolCallId: string; readonly requestId: string; readonly answer: unknown };
  'summary.created': {
    readonly text: string;
    readonly throughSeq: number;
    readonly tokens: number;
    /** The summary call's model, usage and cost: counted in its turn's usage and cost (absent in older logs). */
    readonly model?: string;
    readonly usage?: Usage;
    readonly cost?: number;
  };
  /** A summary call that failed: the step goes on with the newest history that fits. */
  'summary.failed': { readonly throughSeq: number; readonly model: string; readonly error: ErrorData };
  'turn.ended': {
    readonly reason: TurnEndReason;
    readonly text?: string;
    /** The final answer parsed as JSON, when the prompt gave an `outputSchema` and the answer matched it. */
    readonly output?: unknown;
    readonly error?: ErrorData;
    readonly usage: Usage;
    readonly cost: number;
    readonly steps: number;
  };
  'assistant.delta': { readonly text: string };
  /** A running call's progress report, as its worker sent it (`progress` of `total`, in the tool's own unit). */
  'tool.progress': { readonly toolCallId: string; readonly name: string; readonly message: string; readonly progress?: number; readonly total?: number };
  progress: {
    readonly kind: 'provider_call' | 'tool_execution' | 'rolling_summary';
    readonly message: string;
    readonly step: number;
    readonly maxSteps: number;
    readonly toolNames?: readonly string[];
  };
  state: { readonly machine: string; readonly value: string; readonly event: string };
  /**
   * A provider call is tried again: the same model after a wait (`attempt` of `maxAttempts`), or the next
   * model of the turn's fallback chain (`nextModel` set, `attempt` its place in the chain of `maxAttempts`). A tool
   * call no worker listened for is sent again after `delayMs` (`tool` and `toolCallId` set).
   */
  retry: {
    readonly attempt: number;
    readonly maxAttempts: number;
    readonly delayMs: number;
    readonly error: ErrorData;
    /** The model that failed. */
    readonly model?: string;
    /** Set when the step moves on to another model. */
    readonly nextModel?: string;
    /** The tool waited for, when a tool call is the one tried again. */
    readonly tool?: string;
    /** The model's id of that tool call. */
    readonly toolCallId?: string;
  };
  error: ErrorData & { readonly subject?: string };
  /** What a dry-run prompt's first step would send: published instead of calling the model, nothing logged. */
  'request.prepared': {
    readonly model: string;
    readonly fallbackModels?: readonly string[];
    /** The system prompt, recalled memory, history and the prompt, as the provider would get them. */
    readonly messages: readonly ChatMessage[];
    /** The tools offered, with their parameter schemas. */
    readonly tools: readonly ToolSpec[];
    readonly maxOutputTokens: number;
    readonly maxSteps: number;
    readonly maxCost?: number;
    /** True when the step would first summarize older history (the summary call is not shown). */
    readonly needsCompaction: boolean;
    readonly forceTool?: { readonly name: string; readonly args: unknown };
  };
}

export type EventType = keyof EventDataMap;

/** The v1 envelope of every event on the bus. */
export interface Envelope<T extends EventType = EventType> {
  readonly v: 1;
  readonly id: string;
  readonly type: T;
  readonly tenant: string;
  readonly sessionId: string;
  readonly turnId?: string;
  readonly step?: number;
  readonly ts: number;
  readonly data: EventDataMap[T];
  /** The log stream sequence; set on events read back from the log. */
  readonly seq?: number;
}

/** Every event as one discriminated union on `type`. */
export type AgentEvent = { [T in EventType]: Envelope<T> }[EventType];
/** Durable events only. */
export type LogEvent = Extract<AgentEvent, { type: LogEventType }>;
/** Ephemeral events only. */
export type LiveEvent = Extract<AgentEvent, { type: LiveEventType }>;

const LOG_TYPES: ReadonlySet<string> = new Set(Object.values(LogEventType));

/** True when the event type belongs in the durable log. */
export function isLogEventType(type: string): type is LogEventType {
  return LOG_TYPES.has(type);
}

/** Everything needed to make envelopes: ids and clock are injected. */
export interface EnvelopeFactory {
  create<T extends EventType>(
    type: T,
    scope: { tenant: string; sessionId: string; turnId?: string; step?: number },
    data: EventDataMap[T],
  ): Envelope<T>;
}

/** Creates an envelope factory from an id generator and a clock. */
export function createEnvelopeFactory(deps: { newId: () => string; now: () => number }): EnvelopeFactory {
  return {
    create(type, scope, data) {
      const envelope: { -readonly [K in keyof Envelope]: Envelope[K] } = {
        v: 1,
        id: deps.newId(),
        type,
        tenant: scope.tenant,
        sessionId: scope.sessionId,
        ts: deps.now(),
        data,
      };
      if (scope.turnId !== undefined) envelope.turnId = scope.turnId;
      if (scope.step !== undefined) envelope.step = scope.step;
      return envelope as Envelope<typeof type>;
    },
  };
}
