import { fromPromise } from 'xstate';
import { ErrorCode, LogEventType, TurnEndReason, addUsage, toErrorData } from '../../../src/protocol/index.ts';
import type { ErrorData } from '../../../src/protocol/index.ts';
import { CancelledError } from '../../../src/errors.ts';
import { traceTurnEnd, traceTurnStart } from '../../../src/telemetry/index.ts';
import { sessionMachine, turnMachine } from '../../../machines/index.ts';
import type { FinishTurnInput, PrepareInput, PrepareOutput, QueuedTurn, StartTurnOutput } from '../../../machines/index.ts';
import { createPrepareActors } from './prepare-step.ts';
import type { AnyActorSystem, SessionScope, StepActorDeps } from './session-scope.ts';
import type { SessionServices } from './session-services.ts';
import { createStreamActor } from './step-stream.ts';
import { createToolActors } from '../tools/tool-execution.ts';
import { cancelOpenAgentCalls, openAgentSpend } from '../agents/step-profile.ts';

/** How long a turn ending with agent calls open waits for each cancelled child's `turn.ended`, to count what it spent. */
const CHILD_END_WAIT_MS = 2_000;

/** The session machine of a runtime, provided once, and how a session's actor finds its services. */
export interface SessionLogic {
  /** The session machine with every actor provided; start one actor of it per session. */
  readonly machine: ReturnType<typeof provideMachines>;
  /**
   * Gives the actors running in `system` (a session actor's `actor.system`) this session's services. Call it
   * after `createActor` and before `start`; the binding goes with the actor system.
   */
  bind(system: AnyActorSystem, services: SessionServices): void;
  /**
   * What Preparing would build for `input` from `services` (a transcript holding the dry-run prompt), on a scope of
   * its own: no steer is taken and nothing is appended; memory and the tool workers are asked as for a step.
   */
  prepareDryRun(services: SessionServices, input: PrepareInput, signal: AbortSignal): Promise<PrepareOutput>;
}

function provideMachines(actors: ReturnType<typeof createActors>, scopeOf: StepActorDeps['scopeOf']) {
  const { prepare, compact, stream, executeTools, requestApproval, startTurn, finishTurn } = actors;
  return sessionMachine.provide({
    actors: {
      turn: turnMachine.provide({
        actors: { prepare, compact, stream, executeTools, requestApproval },
        actions: {
          stateEntered: ({ context, event, system }, { value }) => scopeOf(system).services.stateEntered?.('turn', value, event.type, context.turn.turnId),
        },
      }),
      startTurn,
      finishTurn,
    },
    actions: {
      stateEntered: ({ context, event, system }, { value }) => scopeOf(system).services.stateEntered?.('session', value, event.type, context.current?.turnId),
    },
  });
}

/**
 * Provides the session and turn machines once per runtime with the effects of a session: context building,
 * provider streaming, tool execution and approval, each appending its log events before it resolves. Each
 * actor finds its session's services through its actor system (see {@link SessionLogic.bind}), so a session
 * holds only its actor, transcript and writer, not a machine definition of its own.
 */
export function createSessionLogic(): SessionLogic {
  const scopes = new WeakMap<AnyActorSystem, SessionScope>();
  const scopeOf = (system: AnyActorSystem): SessionScope => {
    const scope = scopes.get(system);
    if (!scope) throw new Error('no session services are bound to this actor system');
    return scope;
  };
  const actors = createActors(scopeOf);
  return {
    machine: provideMachines(actors, scopeOf),
    bind(system, services) {
      scopes.set(system, { services, compactThroughSeq: 0, escalations: undefined, tools: undefined, recalled: undefined });
    },
    prepareDryRun: (services, input, signal) =>
      actors.prepareStep({ services, compactThroughSeq: 0, escalations: undefined, tools: undefined, recalled: undefined }, input, signal),
  };
}

function createActors(scopeOf: StepActorDeps['scopeOf']) {
  const stepScope: StepActorDeps['stepScope'] = (services, input) => ({ tenant: services.tenant, sessionId: services.sessionId, turnId: input.turnId, step: input.step });

  const progress: StepActorDeps['progress'] = (services, input, kind, message, toolNames) =>
    services.live.publish('progress', stepScope(services, input), {
      kind,
      message: `[${input.step}/${input.maxSteps}] ${message}`,
      step: input.step,
      maxSteps: input.maxSteps,
      ...(toolNames ? { toolNames } : {}),
    });

  const { prepare, compact, prepareStep } = createPrepareActors({ scopeOf, stepScope, progress });
  const stream = createStreamActor({ scopeOf, stepScope, progress });
  const { executeTools, requestApproval } = createToolActors({ scopeOf, progress });

  /**
   * Appends the turn's `turn.started` (model, budgets, deadline) unless the log has it already (a resumed turn), and
   * measures the time left until its deadline, for the turn machine's timer. The append is not waited for: the
   * writer writes the turn's later events after it, and none of them if it fails (`appendRequired`), so the first
   * provider request goes out while its acknowledgement is on its way and the log still has it first.
   */
  const startTurn = fromPromise<StartTurnOutput, QueuedTurn>(async ({ input: turn, system }) => {
    const { services } = scopeOf(system);
    const logged = services.transcript.turnEvents(turn.turnId);
    const traced = traceTurnStart({ tenant: services.tenant, sessionId: services.sessionId, turnId: turn.turnId, model: turn.model, logged });
    if (!logged.some((event) => event.type === LogEventType.turnStarted)) {
      const started = services.writer.appendRequired(LogEventType.turnStarted, { turnId: turn.turnId }, {
        model: turn.model,
        ...(turn.fallbackModels?.length ? { models: turn.fallbackModels } : {}),
        maxSteps: turn.maxSteps,
        ...(turn.maxCost === undefined ? {} : { maxCost: turn.maxCost }),
        deadline: turn.deadline ?? services.now() + services.config.turnTimeoutMs,
        finalAnswer: turn.finalAnswer !== false,
        ...traced,
      });
      // The turn's next write fails with this failure, which ends the turn (and gives the session up).
      started.catch((err: unknown) => services.logger.warn({ err, turnId: turn.turnId }, 'turn.started could not be logged; the turn cannot write on'));
    }
    return turn.deadline === undefined ? {} : { timeLeftMs: Math.max(0, turn.deadline - services.now()) };
  });

  /**
   * Closes the turn's open calls and appends `turn.ended`. When that fails (another writer holds the log, or
   * the log cannot be reached) the turn cannot end in the log: the failure is logged at error and told to
   * clients as a live `error` of the turn, then rejected, and the session host gives the session up (see
   * `session-host.ts`), so that it is opened again from its log.
   */
  const finishTurn = fromPromise<void, FinishTurnInput>(async ({ input, system }) => {
    const scope = scopeOf(system);
    const { services } = scope;
    const { turn, output } = input;
    scope.tools = undefined;
    scope.escalations?.delete(turn.turnId);
    if (scope.escalations?.size === 0) scope.escalations = undefined;
    traceTurnEnd(turn.turnId, output);
    try {
      await closeTurn(services, input);
    } catch (err) {
      services.logger.error(
        { err, turnId: turn.turnId, step: output.steps, reason: output.reason, ...(output.error ? { turnError: output.error } : {}) },
        'turn could not write its end to the log',
      );
      try {
        services.live.publish('error', { tenant: services.tenant, sessionId: services.sessionId, turnId: turn.turnId, step: output.steps }, toErrorData(err));
      } catch (cause) {
        services.logger.warn({ err: cause, turnId: turn.turnId }, 'error event not published');
      }
      throw err;
    }
  });

  /** Every tool call asked for and not answered gets a closing `tool.result`, then the turn its `turn.ended`. */
  async function closeTurn(services: SessionServices, { turn, output }: FinishTurnInput): Promise<void> {
    const { writer, transcript } = services;
    // Agent calls left open: their child sessions are cancelled with the turn, and what each child spent until it ended
    // (read from its log, a short bounded wait) counts in this turn's usage and cost.
    const openAgentCalls = cancelOpenAgentCalls(services, turn.turnId, `the calling turn ended ${output.reason}`);
    const children = await openAgentSpend(services, openAgentCalls, CHILD_END_WAIT_MS);
    let ended = output;
    for (const child of children.values()) ended = { ...ended, usage: addUsage(ended.usage, child.usage), cost: ended.cost + child.cost };
    await writer.exclusive(async (append) => {
      const closing: ErrorData =
        output.reason === TurnEndReason.cancelled
          ? toErrorData(new CancelledError('the turn was cancelled before this call finished'))
          : output.reason === TurnEndReason.deadlineExceeded
            ? { code: ErrorCode.deadlineExceeded, message: 'the turn passed its deadline before this call finished; the call was cancelled', retryable: false }
            : { code: output.reason, message: `the turn ended (${output.reason}) before this call ran`, retryable: false };
      for (const open of transcript.openCalls(turn.turnId)) {
        const child = children.get(open.id);
        await append(LogEventType.toolResult, { turnId: turn.turnId, step: output.steps }, {
          toolCallId: open.id,
          name: open.name,
          output: `${closing.code}: ${closing.message}`,
          isError: true,
          error: closing,
          durationMs: 0,
          ...(child ? { child: child.child, usage: child.usage, cost: child.cost } : {}),
        });
      }
      await append(LogEventType.turnEnded, { turnId: turn.turnId, step: output.steps }, ended);
    });
  }

  return { prepare, compact, stream, executeTools, requestApproval, startTurn, finishTurn, prepareStep };
}
