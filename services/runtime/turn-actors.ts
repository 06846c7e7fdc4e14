import { fromPromise } from 'xstate';
import { ErrorCode, LogEventType, MODEL_PATTERN, TurnEndReason, ZERO_USAGE, toErrorData } from '../../src/protocol/index.ts';
import type { ErrorData, ToolCall, ToolSpec, Usage } from '../../src/protocol/index.ts';
import { CancelledError } from '../../src/errors.ts';
import { contextWindowOf } from '../../src/tokens.ts';
import { closeTranscript, sessionMachine, turnMachine } from '../../machines/index.ts';
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

/** The session machine with every actor of this session provided. */
export type SessionLogic = ReturnType<typeof createSessionLogic>;

/**
 * Provides the session and turn machines with this session's effects: context building, provider
 * streaming, tool execution and approval, each appending its log events before it resolves.
 */
export function createSessionLogic(services: SessionServices) {
  const { writer, transcript, live, config, tenant, sessionId } = services;
  const scopeOf = (input: StepScope) => ({ tenant, sessionId, turnId: input.turnId, step: input.step });
  let compactThroughSeq = 0;
  const tokenCache = new Map<number, number>();
  /** Turns that moved to their large model, and why; a turn stays escalated once it is. */
  const escalations = new Map<string, EscalationReason>();

  const progress = (input: StepScope, kind: 'provider_call' | 'tool_execution' | 'rolling_summary', message: string, toolNames?: string[]) =>
    live.publish('progress', scopeOf(input), {
      kind,
      message: `[${input.step}/${input.maxSteps}] ${message}`,
      step: input.step,
      maxSteps: input.maxSteps,
      ...(toolNames ? { toolNames } : {}),
    });

  async function toolSpecs(signal: AbortSignal): Promise<{ specs: ToolSpec[]; byName: Map<string, ToolInfo> }> {
    const tools = await services.tools.listTools({ signal });
    const byName = new Map(tools.map((tool) => [tool.name, tool]));
    return { specs: tools.map(({ name, description, parameters }) => ({ name, description, parameters })), byName };
  }

  const prepare = fromPromise<PrepareOutput, PrepareInput>(async ({ input, signal }) => {
    for (const text of services.takeSteers()) {
      await writer.append(LogEventType.userMessage, { turnId: input.turnId, step: input.step }, { text, steer: true });
    }
    const { specs } = await toolSpecs(signal);
    const conversation = transcript.conversation(input.turnId);
    const build = (model: string): PreparedContext => buildContext({
      model,
      messages: conversation.messages,
      seqs: conversation.seqs,
      summary: conversation.summary,
      tools: specs,
      toolTokens: services.toolTokens(specs),
      tokens: services.tokens,
      countAt: (index) => {
        const seq = conversation.seqs[index] ?? 0;
        let count = tokenCache.get(seq);
        if (count === undefined) {
          count = services.tokens.countMessage(conversation.messages[index]!);
          if (seq > 0) tokenCache.set(seq, count);
        }
        return count;
      },
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
      const before = escalations.get(input.turnId);
      const decision = decideModel({
        ...input.escalation,
        validationFailures: countValidationFailures(transcript.events, input.turnId),
        contextTokens: small.historyTokens,
        smallContextBudget: small.budget,
        ...(before === undefined ? {} : { escalatedBefore: before }),
      });
      stepModel = decision.model;
      if (decision.escalated && before === undefined) {
        escalations.set(input.turnId, decision.reason);
        services.logger.info({ turnId: input.turnId, step: input.step, from: input.escalation.smallModel, to: decision.model, reason: decision.reason }, 'turn escalated to its large model');
      }
      prepared = decision.escalated ? build(decision.model) : small;
    } else {
      prepared = build(input.model);
    }
    compactThroughSeq = prepared.compactThroughSeq;
    const [, ...fallbackModels] = stepChain(stepModel, input);
    const request = fallbackModels.length > 0 ? { ...prepared.request, fallbackModels } : prepared.request;
    return { needsCompaction: prepared.needsCompaction && !input.compacted, request };
  });

  const compact = fromPromise<void, CompactInput>(async ({ input, signal }) => {
    const throughSeq = compactThroughSeq;
    if (throughSeq === 0) return;
    progress(input, 'rolling_summary', 'Summarizing the earlier conversation');
    const conversation = transcript.conversation(input.turnId);
    const older = conversation.messages.filter((_, index) => (conversation.seqs[index] ?? 0) <= throughSeq);
    const text = older.map((message) => `${message.role}: ${message.content}`).join('\n');
    let summary = '';
    for await (const chunk of services.provider.generate(
      {
        v: 1,
        requestId: services.newId(),
        model: input.model,
        messages: [
          { role: 'system', content: 'Summarize the conversation below for your own later use: facts, decisions, open tasks. Be brief.' },
          { role: 'user', content: `${conversation.summary ? `Earlier summary:\n${conversation.summary}\n\n` : ''}${text}` },
        ],
        tools: [],
        tenant,
        sessionId,
        turnId: input.turnId,
      },
      { signal, idleTimeoutMs: config.providerIdleTimeoutMs, timeoutMs: config.providerTimeoutMs },
    )) {
      if (chunk.type === 'text-delta') summary += chunk.text;
    }
    await writer.append(LogEventType.summaryCreated, { turnId: input.turnId, step: input.step }, {
      text: summary,
      throughSeq,
      tokens: services.tokens.count(summary),
    });
  });

  /** One provider call of a step on one model; `contentStarted` is called once text or a tool call came out. */
  async function streamOnce(input: StreamInput, model: string, contentStarted: () => void, signal: AbortSignal) {
    progress(input, 'provider_call', `Calling ${model}`);
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
        tenant,
        sessionId,
        turnId: input.turnId,
      },
      { signal, idleTimeoutMs: config.providerIdleTimeoutMs, timeoutMs: config.providerTimeoutMs },
    )) {
      switch (chunk.type) {
        case 'text-delta':
          contentStarted();
          text += chunk.text;
          live.publish('assistant.delta', scopeOf(input), { text: chunk.text });
          break;
        case 'tool-call':
          contentStarted();
          toolCalls.push({ id: chunk.toolCallId, name: chunk.name, args: chunk.args });
          break;
        case 'usage':
          usage = chunk.usage;
          break;
        case 'retry':
          live.publish('retry', scopeOf(input), {
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

  const stream = fromPromise<StreamOutput, StreamInput>(async ({ input, signal }) => {
    const { byName } = await toolSpecs(signal);
    const { value } = await runModelChain({
      models: uniqueModels([input.request.model, ...(input.request.fallbackModels ?? [])]),
      signal,
      attempt: ({ model, contentStarted }) => streamOnce(input, model, contentStarted, signal),
      onSwitch: (change) => {
        services.logger.warn({ turnId: input.turnId, step: input.step, from: change.from, to: change.to, error: change.error }, 'provider failed; moving to the next model');
        live.publish('retry', scopeOf(input), {
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
    await writer.append(LogEventType.assistantMessage, { turnId: input.turnId, step: input.step }, { text, toolCalls, usage, cost, model, finishReason });
    const planned: PlannedCall[] = toolCalls.map((call) => ({ ...call, tier: byName.get(call.name)?.tier ?? 'unknown' }));
    return { text, toolCalls: planned, usage, cost };
  });

  async function runTool(input: ExecuteToolsInput, call: PlannedCall, byName: Map<string, ToolInfo>, signal: AbortSignal): Promise<void> {
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
    // After a cancel, finishTurn closes the call; a late result must not be appended too.
    await writer.exclusive(async (append) => {
      if (signal.aborted) return;
      await append(LogEventType.toolResult, scope, error ? { ...result, error } : result);
    });
  }

  const executeTools = fromPromise<void, ExecuteToolsInput>(async ({ input, signal }) => {
    const names = input.calls.map((call) => call.name);
    progress(input, 'tool_execution', `Executing tools: ${names.join(', ')}`, names);
    const { byName } = await toolSpecs(signal);
    await Promise.all(input.calls.map((call) => runTool(input, call, byName, signal)));
    signal.throwIfAborted();
  });

  const requestApproval = fromPromise<void, RequestApprovalInput>(async ({ input }) => {
    await writer.append(LogEventType.approvalRequested, { turnId: input.turnId, step: input.step }, {
      toolCallId: input.call.id,
      name: input.call.name,
      args: input.call.args,
    });
  });

  const finishTurn = fromPromise<void, FinishTurnInput>(async ({ input }) => {
    const { turn, output } = input;
    escalations.delete(turn.turnId);
    await writer.exclusive(async (append) => {
      const asked = transcript.events.flatMap((event) =>
        event.turnId === turn.turnId && event.type === LogEventType.assistantMessage ? event.data.toolCalls : [],
      );
      const answered = new Set(
        transcript.events.flatMap((event) => (event.turnId === turn.turnId && event.type === LogEventType.toolResult ? [event.data.toolCallId] : [])),
      );
      const closing: ErrorData =
        output.reason === TurnEndReason.cancelled
          ? toErrorData(new CancelledError('the turn was cancelled before this call finished'))
          : { code: output.reason, message: `the turn ended (${output.reason}) before this call ran`, retryable: false };
      for (const open of closeTranscript(asked, answered)) {
        await append(LogEventType.toolResult, { turnId: turn.turnId, step: output.steps }, {
          toolCallId: open.toolCallId,
          name: open.name,
          output: `${closing.code}: ${closing.message}`,
          isError: true,
          error: closing,
          durationMs: 0,
        });
      }
      await append(LogEventType.turnEnded, { turnId: turn.turnId, step: output.steps }, output);
    });
  });

  return sessionMachine.provide({
    actors: {
      turn: turnMachine.provide({
        actors: { prepare, compact, stream, executeTools, requestApproval },
        delays: { approvalTimeout: config.approvalTimeoutMs },
      }),
      finishTurn,
    },
  });
}

