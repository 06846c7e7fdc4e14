import type { Context, Span } from '@opentelemetry/api';
import { LogEventType } from '../protocol/index.ts';
import type { ErrorData, LogEvent, TraceContext, Usage } from '../protocol/index.ts';
import { GenAiOperation, SpanAttribute, modelAttributes, scopeAttributes } from './attributes.ts';
import { activeTracing, contextOfLogged, loggedContextOf, markFailed } from './tracing-state.ts';

interface OpenSpan {
  readonly span: Span;
  readonly context: Context;
}

interface OpenTurn extends OpenSpan {
  step?: OpenSpan & { readonly number: number };
}

/** Turns a runtime node could start and never end (it gave the session up): past this many, the oldest go. */
const MAX_OPEN_TURNS = 10_000;

// The open turn spans of this process, by turn id (unique across the fleet). A provider, tool or memory call of a
// turn finds its parent here by the turn id its request carries.
const turns = new Map<string, OpenTurn>();

/** What {@link traceTurnStart} needs of a turn. */
export interface TurnTraceStart {
  readonly tenant: string;
  readonly sessionId: string;
  readonly turnId: string;
  readonly model: string;
  /** The turn's log events so far: its `user.message` (the prompt's trace context) and, once resumed, its `turn.started`. */
  readonly logged: readonly LogEvent[];
}

/**
 * Opens the span of a turn (`invoke_agent`, with tracing on). A new turn's span is a child of the trace context
 * its prompt arrived with, if any, and its own context comes back as `{ trace }`, to log in `turn.started`. A
 * resumed turn (its `turn.started` logged already) continues the trace logged there, with a new span marked
 * `agentbus.turn.resumed`. Returns `{}` when tracing is off, or when there is nothing to log.
 *
 * @example
 * const traced = traceTurnStart({ tenant, sessionId, turnId, model, logged: transcript.turnEvents(turnId) });
 * await append('turn.started', { model, maxSteps, deadline, finalAnswer, ...traced });
 */
export function traceTurnStart(turn: TurnTraceStart): { trace?: TraceContext } {
  const tracing = activeTracing();
  if (!tracing) return {};
  const started = turn.logged.find((event) => event.type === LogEventType.turnStarted);
  const prompt = turn.logged.find((event) => event.type === LogEventType.userMessage && event.data.steer !== true);
  const parentTrace = started ? (started.type === LogEventType.turnStarted ? started.data.trace : undefined) : prompt?.type === LogEventType.userMessage ? prompt.data.trace : undefined;
  const previous = turns.get(turn.turnId);
  if (previous) return started ? {} : withTrace(loggedContextOf(tracing, previous.context));
  const span = tracing.tracer.startSpan(
    GenAiOperation.invokeAgent,
    {
      kind: tracing.api.SpanKind.INTERNAL,
      attributes: {
        [SpanAttribute.operationName]: GenAiOperation.invokeAgent,
        ...modelAttributes(turn.model),
        ...scopeAttributes(turn),
        ...(started ? { [SpanAttribute.turnResumed]: true } : {}),
      },
    },
    contextOfLogged(tracing, parentTrace),
  );
  const context = tracing.api.trace.setSpan(tracing.api.ROOT_CONTEXT, span);
  turns.set(turn.turnId, { span, context });
  if (turns.size > MAX_OPEN_TURNS) {
    const [oldest] = turns.keys();
    if (oldest !== undefined) endOpen(turns.get(oldest));
    if (oldest !== undefined) turns.delete(oldest);
  }
  return started ? {} : withTrace(loggedContextOf(tracing, context));
}

function withTrace(trace: TraceContext | undefined): { trace?: TraceContext } {
  return trace ? { trace } : {};
}

/**
 * Notes that a turn's step `step` begins: its `step` span opens (a child of the turn's), and the step before it
 * ends. Calls again for the same step (a step prepared again after compacting) change nothing.
 */
export function traceStep(turnId: string, step: number): void {
  const tracing = activeTracing();
  const turn = tracing ? turns.get(turnId) : undefined;
  if (!tracing || !turn || turn.step?.number === step) return;
  turn.step?.span.end();
  const span = tracing.tracer.startSpan('step', { kind: tracing.api.SpanKind.INTERNAL, attributes: { [SpanAttribute.step]: step, [SpanAttribute.turnId]: turnId } }, turn.context);
  turn.step = { number: step, span, context: tracing.api.trace.setSpan(turn.context, span) };
}

/** What a turn ended with, as {@link traceTurnEnd} records it. */
export interface TurnTraceEnd {
  readonly reason: string;
  readonly steps: number;
  readonly usage?: Usage;
  readonly cost?: number;
  readonly error?: ErrorData;
}

/** Ends a turn's step and turn spans, with how it ended (reason, steps, usage, cost; an error's code as `error.type`). */
export function traceTurnEnd(turnId: string, output: TurnTraceEnd): void {
  const tracing = activeTracing();
  const turn = tracing ? turns.get(turnId) : undefined;
  if (!tracing || !turn) return;
  turns.delete(turnId);
  const { span } = turn;
  span.setAttribute(SpanAttribute.turnReason, output.reason);
  span.setAttribute(SpanAttribute.turnSteps, output.steps);
  if (output.usage) {
    span.setAttribute(SpanAttribute.inputTokens, output.usage.inputTokens);
    span.setAttribute(SpanAttribute.outputTokens, output.usage.outputTokens);
  }
  if (output.cost !== undefined) span.setAttribute(SpanAttribute.cost, output.cost);
  if (output.error && output.reason !== 'cancelled') markFailed(tracing, span, output.error);
  endOpen(turn);
}

function endOpen(turn: OpenTurn | undefined): void {
  turn?.step?.span.end();
  turn?.span.end();
}

/**
 * The context a call made for a turn is a child of: the turn's current step, else the turn itself; undefined
 * when this process has no open span of that turn.
 */
export function turnContext(turnId: string | undefined): Context | undefined {
  if (turnId === undefined) return undefined;
  const turn = turns.get(turnId);
  return turn?.step?.context ?? turn?.context;
}
