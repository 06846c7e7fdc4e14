import { assign, fromPromise, setup } from 'xstate';
import { ErrorCode, RunState, TurnEndReason, ZERO_USAGE, addUsage, toErrorData } from '../src/protocol/index.ts';
import type { ChatMessage, ErrorData, ToolSpec, Usage } from '../src/protocol/index.ts';
import { afterBatch, askingCall, needsApproval, nextBatch } from './tool-batch.ts';
import type { ApprovalDecision, PlannedCall, SuspendedCall } from './tool-batch.ts';

/** What a provider call is given: built in Preparing. */
export interface PreparedRequest {
  readonly model: string;
  /** Models to try, in order, when `model` fails for good before answering. */
  readonly fallbackModels?: readonly string[];
  readonly messages: readonly ChatMessage[];
  readonly tools: readonly ToolSpec[];
}

/** Fields every turn actor receives. */
export interface StepScope {
  readonly turnId: string;
  readonly model: string;
  readonly step: number;
  readonly maxSteps: number;
  /** The turn's deadline (epoch ms) when its input named one: calls that wait (a rate limit) must not pass it. */
  readonly deadline?: number;
}

/** A turn that starts on a small model and may move to a large one; Preparing decides per step. */
export interface ModelEscalation {
  readonly smallModel: string;
  readonly largeModel: string;
  /** The prompt was flagged complex: the large model from the first step. */
  readonly complex: boolean;
}

/** The models of a turn besides its primary `model`, passed through to Preparing untouched. */
export interface ModelRouting {
  readonly fallbackModels?: readonly string[];
  readonly escalation?: ModelEscalation;
}

export interface PrepareInput extends StepScope, ModelRouting {
  /** True once this step has compacted, so Preparing does not ask again. */
  readonly compacted: boolean;
  /** True for the last call at `maxSteps`: no tools, and the model is asked to answer from what it has. */
  readonly final?: boolean;
}
export interface PrepareOutput {
  readonly needsCompaction: boolean;
  readonly request: PreparedRequest;
}
export type CompactInput = StepScope;
/** What a summary call cost; counted in the turn's usage, cost and `maxCost`. */
export interface CompactOutput {
  readonly usage: Usage;
  readonly cost: number;
}
export interface StreamInput extends StepScope {
  readonly request: PreparedRequest;
  /** The last call at `maxSteps`: whatever tool calls it asks for are dropped, its text is the answer. */
  readonly final?: boolean;
  /** This call is the turn's one retry of a final answer that did not match its `outputSchema`: why it did not. */
  readonly outputRetry?: string;
}
/** A final answer that did not match the turn's `outputSchema`, not yet retried: the call the turn may make again. */
export interface OutputRetry {
  /** Why the answer did not match (the validation errors), as the model is told. */
  readonly reason: string;
  /** The step's request with the answer and the correction asked for appended. */
  readonly request: PreparedRequest;
}
export interface StreamOutput {
  readonly text: string;
  readonly toolCalls: readonly PlannedCall[];
  readonly usage: Usage;
  readonly cost: number;
  /** A final answer of a turn with an `outputSchema`: the answer parsed, when it matched. */
  readonly output?: unknown;
  /** A final answer of a turn with an `outputSchema` that did not match it, after its retry: the turn fails with this. */
  readonly outputError?: ErrorData;
  /**
   * A first final answer that did not match the turn's `outputSchema`: the machine makes the call again (same step)
   * unless the turn has no cost left, and then ends `budget_exceeded`.
   */
  readonly outputRetry?: OutputRetry;
}
export interface ExecuteToolsInput extends StepScope {
  readonly calls: readonly PlannedCall[];
  readonly decisions: Readonly<Record<string, ApprovalDecision>>;
}
/**
 * What a batch of calls did beyond their results: what they cost beyond the tools themselves (an agent call's child
 * turn, counted in the turn's `usage` and `cost`), and the calls that asked the user something
 * (`tool.input_requested`) and wait for the answer.
 */
export interface ExecuteToolsOutput {
  readonly usage?: Usage;
  readonly cost?: number;
  readonly suspended?: readonly SuspendedCall[];
}
/**
 * The call AwaitingApproval waits on: a privileged call to approve, or (`call.asking` set) a call suspended on a
 * question to the user.
 */
export interface RequestApprovalInput extends StepScope {
  readonly call: PlannedCall;
}
/**
 * How the wait of AwaitingApproval ended without a client's APPROVAL or INPUT event: its deadline passed and the
 * request's default decision was logged (`approval`), or nobody answered a question (`input_timeout`); or the
 * answer was already in the log (a resumed turn). Undefined: the actor only asked, and the turn waits for the event.
 */
export type HumanAnswer =
  | { readonly kind: 'approval'; readonly decision: ApprovalDecision }
  | { readonly kind: 'input'; readonly requestId: string; readonly answer: unknown }
  | { readonly kind: 'input_timeout'; readonly requestId: string };

/** Where a resumed turn picks up, rebuilt from the log. */
export interface TurnResume {
  readonly step: number;
  readonly pendingCalls: readonly PlannedCall[];
  readonly decisions: Readonly<Record<string, ApprovalDecision>>;
  readonly usage: Usage;
  readonly cost: number;
}

export interface TurnInput extends ModelRouting {
  readonly turnId: string;
  readonly model: string;
  readonly maxSteps: number;
  readonly maxCost?: number;
  /** Epoch milliseconds past which the turn ends `deadline_exceeded` (logged in `turn.started`; kept on resume). */
  readonly deadline?: number;
  /**
   * Milliseconds left until `deadline` when the turn starts, measured by whoever starts it (the machine reads no
   * clock). Absent: no deadline.
   */
  readonly timeLeftMs?: number;
  /** False: at `maxSteps` the turn ends without a last call that answers from what it has. Default true. */
  readonly finalAnswer?: boolean;
  readonly resume?: TurnResume;
}

/** How the turn ended; becomes `turn.ended`. */
export interface TurnOutput {
  readonly reason: TurnEndReason;
  readonly text?: string;
  /** The final answer parsed, when the turn had an `outputSchema` and the answer matched it. */
  readonly output?: unknown;
  readonly error?: ErrorData;
  readonly usage: Usage;
  readonly cost: number;
  readonly steps: number;
}

export type TurnEvent =
  | { type: 'CANCEL'; reason?: string }
  | ({ type: 'APPROVAL'; toolCallId: string } & ApprovalDecision)
  | { type: 'INPUT'; toolCallId: string; requestId: string; answer: unknown };

/** What a turn was started with: no step changes it. */
interface TurnSettings {
  readonly turnId: string;
  readonly model: string;
  readonly routing: ModelRouting;
  readonly maxSteps: number;
  readonly maxCost: number | undefined;
  readonly deadline: number | undefined;
  readonly timeLeftMs: number | undefined;
  readonly finalAnswer: boolean;
}

/**
 * The turn's context. Every `assign` copies it whole (XState makes a new context object per update, a dozen per
 * turn), and from 20 fields on V8 makes that copy a slow dictionary object: what never changes sits in one object,
 * `turn`, copied as one field. A test keeps it at 16 fields at most.
 */
interface TurnContext {
  readonly turn: TurnSettings;
  /** True in the last call at `maxSteps`. */
  readonly final: boolean;
  readonly step: number;
  readonly compacted: boolean;
  readonly request: PreparedRequest | undefined;
  readonly pending: readonly PlannedCall[];
  readonly decisions: Readonly<Record<string, ApprovalDecision>>;
  readonly usage: Usage;
  readonly cost: number;
  readonly text: string;
  /** The typed final answer, or why it did not match (see {@link StreamOutput}). */
  readonly output?: { readonly value: unknown } | undefined;
  readonly outputError?: ErrorData | undefined;
  /** A final answer to retry (from Streaming), then, while the retry streams, why (see {@link StreamInput}). */
  readonly outputRetry?: OutputRetry | undefined;
  readonly retrying?: string | undefined;
  readonly outcome: TurnOutput['reason'] | undefined;
  readonly error: ErrorData | undefined;
}

/** The longest delay a timer takes (setTimeout's limit): a turn without a deadline schedules this and ignores it. */
const NO_DEADLINE_MS = 2 ** 31 - 1;

function notProvided(name: string) {
  return () => Promise.reject(new Error(`turn actor "${name}" was not provided`));
}

function scope(context: TurnContext): StepScope {
  const { turn } = context;
  return { turnId: turn.turnId, model: turn.model, step: context.step, maxSteps: turn.maxSteps, ...(turn.deadline === undefined ? {} : { deadline: turn.deadline }) };
}

function routingOf(input: TurnInput): ModelRouting {
  return {
    ...(input.fallbackModels === undefined ? {} : { fallbackModels: input.fallbackModels }),
    ...(input.escalation === undefined ? {} : { escalation: input.escalation }),
  };
}

/**
 * The turn: one user prompt from `user.message` to a terminal state. Pure: every effect is an actor
 * named here and provided by the runtime (or a test) with `.provide()`. Write-through to the log
 * happens inside those actors, before they resolve.
 */
export const turnMachine = setup({
  types: {
    context: {} as TurnContext,
    events: {} as TurnEvent,
    input: {} as TurnInput,
    output: {} as TurnOutput,
  },
  actors: {
    prepare: fromPromise<PrepareOutput, PrepareInput>(notProvided('prepare')),
    compact: fromPromise<CompactOutput, CompactInput>(notProvided('compact')),
    stream: fromPromise<StreamOutput, StreamInput>(notProvided('stream')),
    executeTools: fromPromise<ExecuteToolsOutput | void, ExecuteToolsInput>(notProvided('executeTools')),
    requestApproval: fromPromise<HumanAnswer | void, RequestApprovalInput>(notProvided('requestApproval')),
  },
  guards: {
    running: ({ context }) => context.outcome === undefined,
    needsCompaction: ({ context }, params: { needsCompaction: boolean }) => params.needsCompaction && !context.compacted,
    overCost: ({ context }) => context.turn.maxCost !== undefined && context.cost > context.turn.maxCost,
    // A typed answer that did not match, with no cost left for asking again: another provider call would pass `maxCost`.
    retryPastBudget: ({ context }) => context.outputRetry !== undefined && context.turn.maxCost !== undefined && context.cost >= context.turn.maxCost,
    retriesOutput: ({ context }) => context.outputRetry !== undefined,
    // A human is waited for: a call asks the user something, or a privileged call awaits its decision.
    awaitsApproval: ({ context }) => askingCall(context.pending) !== undefined || needsApproval(context.pending, context.decisions),
    awaitedCall: ({ context }, params: { toolCallId: string }) => !askingCall(context.pending) && context.pending[0]?.id === params.toolCallId,
    askingCall: ({ context }, params: { toolCallId: string; requestId: string }) => {
      const call = askingCall(context.pending);
      return call?.id === params.toolCallId && call.asking?.requestId === params.requestId;
    },
    humanAnswered: (_, params: { answer: HumanAnswer | void }) => params.answer !== undefined,
    hasPending: ({ context }) => context.pending.length > 0,
    outOfSteps: ({ context }) => context.step >= context.turn.maxSteps,
    answersAtLast: ({ context }) => context.turn.finalAnswer && !context.final && context.step >= context.turn.maxSteps,
    finalStep: ({ context }) => context.final,
    outputInvalid: ({ context }) => context.outputError !== undefined,
    pastDeadline: ({ context }) => context.outcome === undefined && context.turn.timeLeftMs !== undefined,
  },
  actions: {
    /**
     * Entry of a state the turn rests in (transient ones have none), with the event that led there: the runtime
     * publishes it as the live `state` event. Does nothing unless provided.
     */
    stateEntered: (_, _params: { value: RunState }) => {},
    end: assign((_, params: { reason: TurnEndReason }) => ({ outcome: params.reason })),
    fail: assign((_, params: { error: unknown }) => {
      const error = toErrorData(params.error);
      // A step that began past the deadline (the machine's timer fires late on a busy node) ends the turn as the timer would.
      if (error.code === ErrorCode.deadlineExceeded) return { outcome: TurnEndReason.deadlineExceeded, error };
      return { outcome: error.code === ErrorCode.timeout ? TurnEndReason.timeout : TurnEndReason.failed, error };
    }),
    expire: assign(({ context }) => {
      const at = context.turn.deadline === undefined ? '' : ` at ${new Date(context.turn.deadline).toISOString()}`;
      const error: ErrorData = { code: ErrorCode.deadlineExceeded, message: `the turn passed its deadline${at}; what was in flight was cancelled`, retryable: false };
      return { outcome: TurnEndReason.deadlineExceeded, error };
    }),
    /** Records a decision on the awaited privileged call, or the answer (or its absence) to a suspended call's question. */
    answer: assign(({ context }, params: { answer: HumanAnswer | void; toolCallId?: string }) => {
      const { answer } = params;
      if (!answer) return {};
      if (answer.kind === 'approval') {
        const id = params.toolCallId ?? context.pending[0]?.id;
        return id === undefined ? {} : { decisions: { ...context.decisions, [id]: answer.decision } };
      }
      const asked = askingCall(context.pending);
      if (!asked?.asking || asked.asking.requestId !== answer.requestId) return {};
      const { asking, ...call } = asked;
      const next: PlannedCall =
        answer.kind === 'input'
          ? { ...call, inputs: [...(call.inputs ?? []), { requestId: asking.requestId, question: asking.question, answer: answer.answer }] }
          : { ...call, inputTimedOut: asking };
      return { pending: context.pending.map((candidate) => (candidate === asked ? next : candidate)) };
    }),
  },
  delays: {
    turnDeadline: ({ context }) => Math.min(Math.max(0, context.turn.timeLeftMs ?? NO_DEADLINE_MS), NO_DEADLINE_MS),
  },
}).createMachine({
  id: 'turn',
  context: ({ input }) => ({
    turn: {
      turnId: input.turnId,
      model: input.model,
      routing: routingOf(input),
      maxSteps: input.maxSteps,
      maxCost: input.maxCost,
      deadline: input.deadline,
      timeLeftMs: input.timeLeftMs,
      finalAnswer: input.finalAnswer ?? true,
    },
    final: false,
    step: input.resume?.step ?? 1,
    compacted: false,
    request: undefined,
    pending: input.resume?.pendingCalls ?? [],
    decisions: input.resume?.decisions ?? {},
    usage: input.resume?.usage ?? ZERO_USAGE,
    cost: input.resume?.cost ?? 0,
    text: '',
    output: undefined,
    outputError: undefined,
    outputRetry: undefined,
    retrying: undefined,
    outcome: undefined,
    error: undefined,
  }),
  initial: RunState.preparing,
  on: {
    // Terminal states inherit this handler; the guard keeps a pure transition() from leaving them.
    CANCEL: { guard: 'running', target: `.${RunState.cancelled}` },
  },
  // The deadline holds in every state: leaving the state stops what it invoked (provider and tool calls get their
  // cancel), as a CANCEL does.
  after: {
    turnDeadline: { guard: 'pastDeadline', target: `.${RunState.failed}`, actions: 'expire' },
  },
  states: {
    [RunState.preparing]: {
      entry: { type: 'stateEntered', params: { value: RunState.preparing } },
      // A resumed turn with tool calls still to run goes straight back to them.
      always: [
        { guard: 'awaitsApproval', target: RunState.awaitingApproval },
        { guard: 'hasPending', target: RunState.toolExecution },
      ],
      invoke: {
        id: 'prepare',
        src: 'prepare',
        input: ({ context }) => ({ ...scope(context), ...context.turn.routing, compacted: context.compacted, ...(context.final ? { final: true } : {}) }),
        onDone: [
          {
            guard: { type: 'needsCompaction', params: ({ event }) => ({ needsCompaction: event.output.needsCompaction }) },
            target: RunState.compacting,
          },
          { target: RunState.streaming, actions: assign({ request: ({ event }) => event.output.request }) },
        ],
        onError: { target: RunState.failed, actions: { type: 'fail', params: ({ event }) => ({ error: event.error }) } },
      },
    },
    [RunState.compacting]: {
      entry: { type: 'stateEntered', params: { value: RunState.compacting } },
      invoke: {
        id: 'compact',
        src: 'compact',
        input: ({ context }) => scope(context),
        // A failed summary is not fatal: Preparing then keeps only the newest history that fits.
        onDone: {
          target: 'compacted',
          actions: assign(({ context, event }) => ({
            compacted: true,
            usage: addUsage(context.usage, event.output.usage),
            cost: context.cost + event.output.cost,
          })),
        },
        onError: { target: RunState.preparing, actions: assign({ compacted: true }) },
      },
    },
    compacted: {
      always: [{ guard: 'overCost', target: RunState.budgetExceeded }, { target: RunState.preparing }],
    },
    [RunState.streaming]: {
      entry: { type: 'stateEntered', params: { value: RunState.streaming } },
      invoke: {
        id: 'stream',
        src: 'stream',
        input: ({ context }) => {
          if (!context.request) throw new Error('Streaming entered without a prepared request');
          return {
            ...scope(context),
            request: context.request,
            ...(context.final ? { final: true } : {}),
            ...(context.retrying === undefined ? {} : { outputRetry: context.retrying }),
          };
        },
        onDone: {
          target: 'streamed',
          actions: assign(({ context, event }) => ({
            usage: addUsage(context.usage, event.output.usage),
            cost: context.cost + event.output.cost,
            text: event.output.text,
            output: 'output' in event.output ? { value: event.output.output } : undefined,
            outputError: event.output.outputError,
            outputRetry: event.output.outputRetry,
            retrying: undefined,
            pending: event.output.toolCalls,
            request: undefined,
          })),
        },
        onError: { target: RunState.failed, actions: { type: 'fail', params: ({ event }) => ({ error: event.error }) } },
      },
    },
    streamed: {
      always: [
        { guard: 'overCost', target: RunState.budgetExceeded },
        // A typed final answer that did not match is asked for once more in the same step (the last call at maxSteps
        // too), but not by a turn with no cost left: the retry is a provider call like any other.
        { guard: 'retryPastBudget', target: RunState.budgetExceeded },
        {
          guard: 'retriesOutput',
          target: RunState.streaming,
          actions: assign(({ context }) => ({ request: context.outputRetry?.request, retrying: context.outputRetry?.reason, outputRetry: undefined })),
        },
        { guard: 'finalStep', target: RunState.budgetExceeded, actions: assign({ pending: [] }) },
        { guard: 'awaitsApproval', target: RunState.awaitingApproval },
        { guard: 'hasPending', target: RunState.toolExecution },
        { guard: 'outputInvalid', target: RunState.failed, actions: assign(({ context }) => ({ outcome: TurnEndReason.failed, error: context.outputError })) },
        { target: RunState.yielding },
      ],
    },
    [RunState.toolExecution]: {
      entry: { type: 'stateEntered', params: { value: RunState.toolExecution } },
      invoke: {
        id: 'executeTools',
        src: 'executeTools',
        input: ({ context }) => ({ ...scope(context), calls: nextBatch(context.pending), decisions: context.decisions }),
        onDone: {
          target: 'toolsRan',
          // Calls that asked the user something stay pending, at the front, until answered; an agent call's child
          // turn counts in this turn's usage and cost.
          actions: assign(({ context, event }) => ({
            pending: afterBatch(context.pending, event.output?.suspended),
            ...(event.output?.usage ? { usage: addUsage(context.usage, event.output.usage), cost: context.cost + (event.output.cost ?? 0) } : {}),
          })),
        },
        onError: { target: RunState.failed, actions: { type: 'fail', params: ({ event }) => ({ error: event.error }) } },
      },
    },
    toolsRan: {
      always: [
        // An agent call's child turn counts in this turn's cost.
        { guard: 'overCost', target: RunState.budgetExceeded },
        { guard: 'awaitsApproval', target: RunState.awaitingApproval },
        { guard: 'hasPending', target: RunState.toolExecution },
        // Out of steps: one last call without tools (in the same step) answers from what the turn gathered, unless the
        // prompt said not to.
        { guard: 'answersAtLast', target: RunState.preparing, actions: assign({ compacted: false, decisions: {}, final: true }) },
        { guard: 'outOfSteps', target: RunState.budgetExceeded },
        {
          target: RunState.preparing,
          // Decisions are per step: models that reuse ids (`call_0` in every response) would otherwise have the
          // next step's privileged call approved (or denied) by this step's decision.
          actions: assign(({ context }) => ({ step: context.step + 1, compacted: false, decisions: {} })),
        },
      ],
    },
    // Waits for a human: a decision on a privileged call (APPROVAL: approve, deny, edit its args, or respond in the
    // tool's place), or the answer to a question a suspended call asked (INPUT). The request's durable deadline is
    // kept by `requestApproval`, which resolves with the default decision (or `input_timeout`) when it passes.
    [RunState.awaitingApproval]: {
      entry: { type: 'stateEntered', params: { value: RunState.awaitingApproval } },
      invoke: {
        id: 'requestApproval',
        src: 'requestApproval',
        input: ({ context }) => {
          const call = askingCall(context.pending) ?? context.pending[0];
          if (!call) throw new Error('AwaitingApproval entered without a pending call');
          return { ...scope(context), call };
        },
        onDone: {
          guard: { type: 'humanAnswered', params: ({ event }) => ({ answer: event.output }) },
          target: 'humanAnswered',
          actions: { type: 'answer', params: ({ event }) => ({ answer: event.output }) },
        },
        onError: { target: RunState.failed, actions: { type: 'fail', params: ({ event }) => ({ error: event.error }) } },
      },
      on: {
        APPROVAL: {
          guard: { type: 'awaitedCall', params: ({ event }) => ({ toolCallId: event.toolCallId }) },
          target: 'humanAnswered',
          actions: {
            type: 'answer',
            params: ({ event }) => {
              const { type: _type, toolCallId, ...decision } = event;
              return { toolCallId, answer: { kind: 'approval' as const, decision } };
            },
          },
        },
        INPUT: {
          guard: { type: 'askingCall', params: ({ event }) => ({ toolCallId: event.toolCallId, requestId: event.requestId }) },
          target: 'humanAnswered',
          actions: { type: 'answer', params: ({ event }) => ({ answer: { kind: 'input' as const, requestId: event.requestId, answer: event.answer } }) },
        },
      },
    },
    humanAnswered: {
      // Several calls of one batch may have asked: each is answered before the batch runs again.
      always: [{ guard: 'awaitsApproval', target: RunState.awaitingApproval }, { target: RunState.toolExecution }],
    },
    [RunState.yielding]: {
      type: 'final',
      entry: [
        { type: 'end', params: { reason: TurnEndReason.yielded } },
        { type: 'stateEntered', params: { value: RunState.yielding } },
      ],
    },
    [RunState.cancelled]: {
      type: 'final',
      entry: [
        { type: 'end', params: { reason: TurnEndReason.cancelled } },
        { type: 'stateEntered', params: { value: RunState.cancelled } },
      ],
    },
    [RunState.budgetExceeded]: {
      type: 'final',
      entry: [
        { type: 'end', params: { reason: TurnEndReason.budgetExceeded } },
        { type: 'stateEntered', params: { value: RunState.budgetExceeded } },
      ],
    },
    [RunState.failed]: { type: 'final', entry: { type: 'stateEntered', params: { value: RunState.failed } } },
  },
  output: ({ context }) => {
    const output: TurnOutput = {
      reason: context.outcome ?? TurnEndReason.failed,
      usage: context.usage,
      cost: context.cost,
      steps: context.step,
    };
    return {
      ...output,
      ...(context.text !== '' ? { text: context.text } : {}),
      ...(context.output ? { output: context.output.value } : {}),
      ...(context.error ? { error: context.error } : {}),
    };
  },
});
