import { setTimeout as delay } from 'node:timers/promises';
import { fromPromise } from 'xstate';
import type { AnyActorRef } from 'xstate';
import { ErrorCode, LogEventType, MODEL_PATTERN, TurnEndReason, ZERO_USAGE, toErrorData } from '../../src/protocol/index.ts';
import type { ErrorData, ToolCall, ToolSpec, Usage } from '../../src/protocol/index.ts';
import { CancelledError, abortReason } from '../../src/errors.ts';
import { contextWindowOf } from '../../src/tokens.ts';
import { sessionMachine, turnMachine } from '../../machines/index.ts';
import type {
  CompactInput,
  ExecuteToolsInput,
  FinishTurnInput,
  PlannedCall,
  PrepareInput,
  PrepareOutput,
  RequestApprovalInput,
  StepScope,
  StreamInput,
  StreamOutput,
} from '../../machines/index.ts';
import { buildContext } from './context-builder.ts';
import type { PreparedContext } from './context-builder.ts';
import { runModelChain, stepChain, uniqueModels } from './model-chain.ts';
import { countValidationFailures, decideModel } from './model-escalation.ts';
import type { EscalationReason } from './model-escalation.ts';
import type { ToolInfo } from './ports.ts';
import type { SessionServices } from './session-services.ts';

/** The actor system a session actor and its children share. */
type AnyActorSystem = AnyActorRef['system'];

/** What one session's actors keep between steps, besides its services. */
interface SessionScope {
  readonly services: SessionServices;
  /** Set by Preparing when compaction is due: summarize the messages up to this log sequence. */
  compactThroughSeq: number;
  /** Turns that moved to their large model, and why; a turn stays escalated once it is. */
  escalations: Map<string, EscalationReason> | undefined;
  /**
   * The tools Preparing offered the model this step, by name: Streaming plans the calls' tiers and
   * ToolExecution runs them against the same list instead of discovering again. Undefined until a step has
   * prepared (a resumed turn starts in ToolExecution) and once the turn is finished.
   */
  tools: Map<string, ToolInfo> | undefined;
}

/** The session machine of a runtime, provided once, and how a session's actor finds its services. */
export interface SessionLogic {
  /** The session machine with every actor provided; start one actor of it per session. */
  readonly machine: ReturnType<typeof provideMachines>;
  /**
   * Gives the actors running in `system` (a session actor's `actor.system`) this session's services. Call it
   * after `createActor` and before `start`; the binding goes with the actor system.
   */
  bind(system: AnyActorSystem, services: SessionServices): void;
}

function provideMachines(actors: ReturnType<typeof createActors>, approvalTimeoutMs: number) {
  const { prepare, compact, stream, executeTools, requestApproval, finishTurn } = actors;
  return sessionMachine.provide({
    actors: {
      turn: turnMachine.provide({
        actors: { prepare, compact, stream, executeTools, requestApproval },
        delays: { approvalTimeout: approvalTimeoutMs },
      }),
      finishTurn,
    },
  });
}

/**
 * Provides the session and turn machines once per runtime with the effects of a session: context building,
 * provider streaming, tool execution and approval, each appending its log events before it resolves. Each
 * actor finds its session's services through its actor system (see {@link SessionLogic.bind}), so a session
 * holds only its actor, transcript and writer, not a machine definition of its own.
 */
export function createSessionLogic(options: { approvalTimeoutMs: number }): SessionLogic {
  const scopes = new WeakMap<AnyActorSystem, SessionScope>();
  const scopeOf = (system: AnyActorSystem): SessionScope => {
    const scope = scopes.get(system);
    if (!scope) throw new Error('no session services are bound to this actor system');
    return scope;
  };
  return {
    machine: provideMachines(createActors(scopeOf), options.approvalTimeoutMs),
    bind(system, services) {
      scopes.set(system, { services, compactThroughSeq: 0, escalations: undefined, tools: undefined });
    },
  };
}

function createActors(scopeOf: (system: AnyActorSystem) => SessionScope) {
  const stepScope = (services: SessionServices, input: StepScope) => ({ tenant: services.tenant, sessionId: services.sessionId, turnId: input.turnId, step: input.step });

  const progress = (services: SessionServices, input: StepScope, kind: 'provider_call' | 'tool_execution' | 'rolling_summary', message: string, toolNames?: string[]) =>
    services.live.publish('progress', stepScope(services, input), {
      kind,
      message: `[${input.step}/${input.maxSteps}] ${message}`,
      step: input.step,
      maxSteps: input.maxSteps,
      ...(toolNames ? { toolNames } : {}),
    });

  /** Discovers the tools live workers serve and keeps them, by name, as the step's list. */
  async function discoverTools(scope: SessionScope, signal: AbortSignal): Promise<{ tools: readonly ToolInfo[]; byName: Map<string, ToolInfo> }> {
    const tools = await scope.services.tools.listTools({ signal });
    const byName = new Map(tools.map((tool) => [tool.name, tool]));
    scope.tools = byName;
    return { tools, byName };
  }

  /** The step's tools by name: those Preparing discovered, or (for a resumed turn) a discovery now. */
  async function stepTools(scope: SessionScope, signal: AbortSignal): Promise<Map<string, ToolInfo>> {
    return scope.tools ?? (await discoverTools(scope, signal)).byName;
  }

  const prepare = fromPromise<PrepareOutput, PrepareInput>(async ({ input, signal, system }) => {
    const scope = scopeOf(system);
    const { services } = scope;
    const { writer, transcript, config } = services;
    for (const text of services.takeSteers()) {
      await writer.append(LogEventType.userMessage, { turnId: input.turnId, step: input.step }, { text, steer: true });
    }
    const { tools } = await discoverTools(scope, signal);
    const specs: ToolSpec[] = tools.map(({ name, description, parameters }) => ({ name, description, parameters }));
    const history = transcript.conversation(input.turnId);
    const toolTokens = services.toolTokens(specs);
    const build = (model: string): PreparedContext => buildContext({
      model,
      history,
      tools: specs,
      toolTokens,
      tokens: services.tokens,
      options: {
        systemPrompt: config.systemPrompt,
        contextWindow: contextWindowOf(model),
        maxOutputTokens: config.maxOutputTokens,
      },
    });
    let stepModel = input.model;
    let prepared: PreparedContext;
    if (input.escalation) {
      const small = build(input.escalation.smallModel);
      const before = scope.escalations?.get(input.turnId);
      const decision = decideModel({
        ...input.escalation,
        validationFailures: countValidationFailures(transcript.turnEvents(input.turnId), input.turnId),
        contextTokens: small.historyTokens,
        smallContextBudget: small.budget,
        ...(before === undefined ? {} : { escalatedBefore: before }),
      });
      stepModel = decision.model;
      if (decision.escalated && before === undefined) {
        (scope.escalations ??= new Map()).set(input.turnId, decision.reason);
        services.logger.info({ turnId: input.turnId, step: input.step, from: input.escalation.smallModel, to: decision.model, reason: decision.reason }, 'turn escalated to its large model');
      }
      prepared = decision.escalated ? build(decision.model) : small;
    } else {
      prepared = build(input.model);
    }
    scope.compactThroughSeq = prepared.compactThroughSeq;
    const [, ...fallbackModels] = stepChain(stepModel, input);
    const request = fallbackModels.length > 0 ? { ...prepared.request, fallbackModels } : prepared.request;
    return { needsCompaction: prepared.needsCompaction && !input.compacted, request };
  });

  const compact = fromPromise<void, CompactInput>(async ({ input, signal, system }) => {
    const scope = scopeOf(system);
    const { services } = scope;
    const { config } = services;
    const throughSeq = scope.compactThroughSeq;
    if (throughSeq === 0) return;
    progress(services, input, 'rolling_summary', 'Summarizing the earlier conversation');
    const history = services.transcript.conversation(input.turnId);
    // The oldest messages of this turn's view up to Preparing's cut: exactly those the summary will replace.
    // Not every message logged up to throughSeq: a prompt queued meanwhile was logged earlier than the rest
    // of this turn, and is not this turn's to summarize.
    const older: string[] = [];
    for (let index = 0, cut = history.summaryCut(throughSeq); index < cut; index++) {
      const message = history.message(index);
      older.push(`${message.role}: ${message.content}`);
    }
    const text = older.join('\n');
    let summary = '';
    for await (const chunk of services.provider.generate(
      {
        v: 1,
        requestId: services.newId(),
        model: input.model,
        messages: [
          { role: 'system', content: 'Summarize the conversation below for your own later use: facts, decisions, open tasks. Be brief.' },
          { role: 'user', content: `${history.summary ? `Earlier summary:\n${history.summary}\n\n` : ''}${text}` },
        ],
        tools: [],
        tenant: services.tenant,
        sessionId: services.sessionId,
        turnId: input.turnId,
      },
      { signal, idleTimeoutMs: config.providerIdleTimeoutMs, timeoutMs: config.providerTimeoutMs },
    )) {
      if (chunk.type === 'text-delta') summary += chunk.text;
    }
    await services.writer.append(LogEventType.summaryCreated, { turnId: input.turnId, step: input.step }, {
      text: summary,
      throughSeq,
      tokens: services.tokens.count(summary),
    });
  });

  /**
   * Streams one model call; `contentStarted` is called once text or a tool call came out. A stream
   * interrupted midway (chunks lost across a reconnect, an upstream stream cut after its first token) is
   * made again from the start, at most twice. Nothing of it is logged yet, and a live `retry` tells clients
   * to drop the partial text they were shown.
   */
  async function streamWithRestart(services: SessionServices, input: StreamInput, model: string, contentStarted: () => void, signal: AbortSignal) {
    const delays = [250, 1000];
    let interrupted = false;
    for (let attempt = 1; ; attempt++) {
      try {
        return await streamOnce(services, input, model, contentStarted, signal);
      } catch (error) {
        const data = toErrorData(error);
        // After an interruption the provider may still be reconnecting: "no responders" is worth a wait too.
        const again = data.code === ErrorCode.streamInterrupted || (interrupted && data.code === ErrorCode.noResponders);
        const delayMs = delays[attempt - 1];
        if (!again || delayMs === undefined || signal.aborted) throw error;
        interrupted = true;
        services.logger.warn({ turnId: input.turnId, step: input.step, model, error: data }, 'provider stream interrupted; calling again');
        services.live.publish('retry', stepScope(services, input), { attempt: attempt + 1, maxAttempts: delays.length + 1, delayMs, error: data, model });
        // Node rejects an aborted delay with a plain AbortError; the turn needs the signal's own reason (a timeout stays a timeout).
        await delay(delayMs, undefined, { signal }).catch(() => {
          throw abortReason(signal);
        });
      }
    }
  }

  async function streamOnce(services: SessionServices, input: StreamInput, model: string, contentStarted: () => void, signal: AbortSignal) {
    const { config, live } = services;
    progress(services, input, 'provider_call', `Calling ${model}`);
    let text = '';
    const toolCalls: ToolCall[] = [];
    let usage: Usage = ZERO_USAGE;
    let cost = 0;
    let served = model;
    let finishReason = 'stop';
    for await (const chunk of services.provider.generate(
      {
        v: 1,
        requestId: services.newId(),
        model,
        messages: [...input.request.messages],
        tools: [...input.request.tools],
        maxTokens: config.maxOutputTokens,
        tenant: services.tenant,
        sessionId: services.sessionId,
        turnId: input.turnId,
      },
      { signal, idleTimeoutMs: config.providerIdleTimeoutMs, timeoutMs: config.providerTimeoutMs },
    )) {
      switch (chunk.type) {
        case 'text-delta':
          contentStarted();
          text += chunk.text;
          live.publish('assistant.delta', stepScope(services, input), { text: chunk.text });
          break;
        case 'tool-call':
          contentStarted();
          toolCalls.push({ id: chunk.toolCallId, name: chunk.name, args: chunk.args });
          break;
        case 'usage':
          usage = chunk.usage;
          break;
        case 'retry':
          live.publish('retry', stepScope(services, input), {
            attempt: chunk.attempt,
            maxAttempts: chunk.maxAttempts,
            delayMs: chunk.delayMs,
            error: chunk.error,
            model,
          });
          break;
        case 'done':
          cost = chunk.cost ?? 0;
          // A full `<provider>:<model>` name says which model answered (an alias may resolve to a dated one).
          if (chunk.model !== undefined && MODEL_PATTERN.test(chunk.model)) served = chunk.model;
          finishReason = chunk.finishReason;
          break;
        case 'error':
          break;
      }
    }
    return { text, toolCalls, usage, cost, model: served, finishReason };
  }

  const stream = fromPromise<StreamOutput, StreamInput>(async ({ input, signal, system }) => {
    const scope = scopeOf(system);
    const { services } = scope;
    const byName = await stepTools(scope, signal);
    const { value } = await runModelChain({
      models: uniqueModels([input.request.model, ...(input.request.fallbackModels ?? [])]),
      signal,
      attempt: ({ model, contentStarted }) => streamWithRestart(services, input, model, contentStarted, signal),
      onSwitch: (change) => {
        services.logger.warn({ turnId: input.turnId, step: input.step, from: change.from, to: change.to, error: change.error }, 'provider failed; moving to the next model');
        services.live.publish('retry', stepScope(services, input), {
          attempt: change.attempt,
          maxAttempts: change.maxAttempts,
          delayMs: 0,
          error: change.error,
          model: change.from,
          nextModel: change.to,
        });
      },
    });
    signal.throwIfAborted();
    const { text, toolCalls, usage, cost, model, finishReason } = value;
    await services.writer.append(LogEventType.assistantMessage, { turnId: input.turnId, step: input.step }, { text, toolCalls, usage, cost, model, finishReason });
    const planned: PlannedCall[] = toolCalls.map((call) => ({ ...call, tier: byName.get(call.name)?.tier ?? 'unknown' }));
    return { text, toolCalls: planned, usage, cost };
  });

  async function runTool(services: SessionServices, input: ExecuteToolsInput, call: PlannedCall, byName: Map<string, ToolInfo>, signal: AbortSignal): Promise<void> {
    const { config, writer, tenant, sessionId } = services;
    const scope = { turnId: input.turnId, step: input.step };
    const effectId = `${sessionId}:${input.turnId}:${call.id}`;
    const started = services.now();
    await writer.append(LogEventType.toolUse, scope, { toolCallId: call.id, effectId, name: call.name, args: call.args, tier: call.tier });
    let output: string;
    let error: ErrorData | undefined;
    const decision = input.decisions[call.id];
    const info = byName.get(call.name);
    if (decision && !decision.approved) {
      error = { code: ErrorCode.denied, message: `approval denied${decision.reason ? `: ${decision.reason}` : ''}`, retryable: false };
    } else if (!info) {
      const available = [...byName.keys()].sort().join(', ') || 'none';
      error = { code: ErrorCode.unknownTool, message: `unknown tool "${call.name}"; available tools: ${available}`, retryable: false };
    }
    if (error) {
      output = `${error.code}: ${error.message}`;
    } else {
      const timeoutMs = info?.timeoutMs ?? config.toolTimeoutMs;
      const reply = await services.tools.call(
        { v: 1, callId: call.id, effectId, name: call.name, args: call.args, tenant, sessionId, turnId: input.turnId, deadline: services.now() + timeoutMs },
        { signal, timeoutMs },
      );
      if (reply.ok) {
        output = typeof reply.output === 'string' ? reply.output : JSON.stringify(reply.output ?? null);
      } else {
        error = reply.error;
        output = `${reply.error.code}: ${reply.error.message}`;
      }
    }
    output = services.scrubber.scrub(output);
    if (output.length > config.maxToolOutputChars) {
      output = `${output.slice(0, config.maxToolOutputChars)}\n[output truncated at ${config.maxToolOutputChars} characters]`;
    }
    const result = { toolCallId: call.id, name: call.name, output, isError: error !== undefined, durationMs: services.now() - started };
    // After a cancel, finishTurn closes the call; a late result must not be appended too. Results that
    // finish together are written as one pipelined group.
    await writer.appendUnless(LogEventType.toolResult, scope, error ? { ...result, error } : result, { unless: signal });
  }

  const executeTools = fromPromise<void, ExecuteToolsInput>(async ({ input, signal, system }) => {
    const scope = scopeOf(system);
    const { services } = scope;
    const names = input.calls.map((call) => call.name);
    progress(services, input, 'tool_execution', `Executing tools: ${names.join(', ')}`, names);
    const byName = await stepTools(scope, signal);
    await Promise.all(input.calls.map((call) => runTool(services, input, call, byName, signal)));
    signal.throwIfAborted();
  });

  const requestApproval = fromPromise<void, RequestApprovalInput>(async ({ input, system }) => {
    await scopeOf(system).services.writer.append(LogEventType.approvalRequested, { turnId: input.turnId, step: input.step }, {
      toolCallId: input.call.id,
      name: input.call.name,
      args: input.call.args,
    });
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
    await writer.exclusive(async (append) => {
      const closing: ErrorData =
        output.reason === TurnEndReason.cancelled
          ? toErrorData(new CancelledError('the turn was cancelled before this call finished'))
          : { code: output.reason, message: `the turn ended (${output.reason}) before this call ran`, retryable: false };
      for (const open of transcript.openCalls(turn.turnId)) {
        await append(LogEventType.toolResult, { turnId: turn.turnId, step: output.steps }, {
          toolCallId: open.id,
          name: open.name,
          output: `${closing.code}: ${closing.message}`,
          isError: true,
          error: closing,
          durationMs: 0,
        });
      }
      await append(LogEventType.turnEnded, { turnId: turn.turnId, step: output.steps }, output);
    });
  }

  return { prepare, compact, stream, executeTools, requestApproval, finishTurn };
}
