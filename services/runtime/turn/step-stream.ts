import { setTimeout as delay } from 'node:timers/promises';
import { fromPromise } from 'xstate';
import { ErrorCode, LogEventType, MODEL_PATTERN, ZERO_USAGE, toErrorData } from '../../../src/protocol/index.ts';
import type { ToolCall, Usage } from '../../../src/protocol/index.ts';
import { abortReason } from '../../../src/errors.ts';
import type { PlannedCall, StreamInput, StreamOutput } from '../../../machines/index.ts';
import { runModelChain, uniqueModels } from '../models/model-chain.ts';
import { waitForService } from '../models/service-wait.ts';
import type { ServiceWaitReport } from '../models/service-wait.ts';
import { forcedStep } from './forced-step.ts';
import { stepTools } from './session-scope.ts';
import type { StepActorDeps } from './session-scope.ts';
import type { SessionServices } from './session-services.ts';
import { deadlineOf } from '../limits/limited-provider.ts';
import { outputRetryMessage } from '../../../src/output-schema.ts';
import { outputInvalidError, outputRetried, outputSchemaOf, validatorOf } from './turn-output.ts';

/** A step's call as made: the machine's input, and the turn's `outputSchema` sent with it when it has one. */
type CallInput = StreamInput & { readonly outputSchema?: Record<string, unknown> };

/**
 * The turn's `stream` actor: calls the provider along the step's model chain, publishes the deltas live,
 * appends `assistant.message`, and plans the tool calls' tiers against the tools the model was offered.
 */
export function createStreamActor({ scopeOf, stepScope, progress }: Pick<StepActorDeps, 'scopeOf' | 'stepScope' | 'progress'>) {
  /**
   * Streams one model call; `contentStarted` is called once text or a tool call came out. A stream
   * interrupted midway (chunks lost across a reconnect, an upstream stream cut after its first token, the
   * provider instance killed: its heartbeats stop) is made again from the start, at most twice. Nothing of it
   * is logged yet, and a live `retry` tells clients to drop the partial text they were shown. After an
   * interruption the provider may still be restarting: a `no_responders` then waits for it (up to
   * `waitForServiceMs`) on this same model, whose text the client has already seen.
   */
  async function streamWithRestart(services: SessionServices, input: CallInput, model: string, contentStarted: () => void, signal: AbortSignal) {
    const delays = [250, 1000];
    const once = () => streamOnce(services, input, model, contentStarted, signal);
    for (let attempt = 1; ; attempt++) {
      try {
        return attempt === 1 ? await once() : await waitForService({ call: once, waitMs: services.config.waitForServiceMs, signal, onWait: reportWait(services, input, model) });
      } catch (error) {
        const data = toErrorData(error);
        const delayMs = delays[attempt - 1];
        if (data.code !== ErrorCode.streamInterrupted || delayMs === undefined || signal.aborted) throw error;
        services.logger.warn({ turnId: input.turnId, step: input.step, model, error: data }, 'provider stream interrupted; calling again');
        services.live.publish('retry', stepScope(services, input), { attempt: attempt + 1, maxAttempts: delays.length + 1, delayMs, error: data, model });
        // Node rejects an aborted delay with a plain AbortError; the turn needs the signal's own reason (a timeout stays a timeout).
        await delay(delayMs, undefined, { signal }).catch(() => {
          throw abortReason(signal);
        });
      }
    }
  }

  /** Publishes a wait for an absent provider as a live `retry`, and logs it. */
  function reportWait(services: SessionServices, input: StreamInput, model: string) {
    return (wait: ServiceWaitReport) => {
      services.logger.warn({ turnId: input.turnId, step: input.step, model, attempt: wait.attempt, delayMs: wait.delayMs, error: wait.error }, 'no provider serves the model; waiting for one');
      services.live.publish('retry', stepScope(services, input), { ...wait, model });
    };
  }

  async function streamOnce(services: SessionServices, input: CallInput, model: string, contentStarted: () => void, signal: AbortSignal) {
    const { config, live } = services;
    progress(services, input, 'provider_call', input.final ? `Calling ${model} for a last answer, without tools` : `Calling ${model}`);
    const startedAt = services.now();
    let firstTokenMs: number | undefined;
    const firstToken = () => {
      firstTokenMs ??= services.now() - startedAt;
      contentStarted();
    };
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
        ...(input.outputSchema ? { outputSchema: input.outputSchema } : {}),
        tenant: services.tenant,
        sessionId: services.sessionId,
        turnId: input.turnId,
      },
      { signal, idleTimeoutMs: config.providerIdleTimeoutMs, timeoutMs: config.providerTimeoutMs, ...deadlineOf(services.transcript, input) },
    )) {
      switch (chunk.type) {
        case 'text-delta':
          firstToken();
          text += chunk.text;
          live.publish('assistant.delta', stepScope(services, input), { text: chunk.text });
          break;
        case 'tool-call':
          firstToken();
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
    const latencyMs = services.now() - startedAt;
    return { text, toolCalls, usage, cost, model: served, finishReason, latencyMs, ...(firstTokenMs === undefined ? {} : { firstTokenMs }) };
  }

  /** Calls the provider along the step's model chain, waiting (bounded) for one that serves it; nothing is logged yet. */
  async function callChain(services: SessionServices, input: CallInput, signal: AbortSignal) {
    const models = uniqueModels([input.request.model, ...(input.request.fallbackModels ?? [])]);
    // A chain whose last model has no provider serving it (none started yet, or restarting) is run again from
    // its first model after a wait: fallbacks are tried at once, and the primary is preferred again once it is back.
    const { value } = await waitForService({
      waitMs: services.config.waitForServiceMs,
      signal,
      onWait: reportWait(services, input, models[models.length - 1] ?? input.request.model),
      call: () =>
        runModelChain({
          models,
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
        }),
    });
    return value;
  }

  return fromPromise<StreamOutput, StreamInput>(({ input, signal, system }) => stream(input, signal, system));

  async function stream(input: StreamInput, signal: AbortSignal, system: Parameters<StepActorDeps['scopeOf']>[0]): Promise<StreamOutput> {
    const scope = scopeOf(system);
    const { services } = scope;
    const byName = await stepTools(scope, signal, input.turnId);
    const forced = forcedStep(services.transcript, input.turnId, input.step)?.forceTool;
    if (forced) {
      // The prompt pinned this step's call: logged as the step's answer, marked forced, then run as any call is.
      const call: ToolCall = { id: `forced_${services.newId()}`, name: forced.name, args: forced.args };
      const model = input.request.model;
      await services.writer.append(LogEventType.assistantMessage, { turnId: input.turnId, step: input.step }, { text: '', toolCalls: [call], usage: ZERO_USAGE, cost: 0, model, finishReason: 'tool_calls', forced: true });
      return { text: '', toolCalls: [{ ...call, tier: byName.get(call.name)?.tier ?? 'unknown' }], usage: ZERO_USAGE, cost: 0 };
    }
    const outputSchema = outputSchemaOf(services.transcript, input.turnId);
    if (input.outputRetry !== undefined) {
      // The machine chose to ask again (the turn had cost left): the validation error goes back to the model, logged so
      // the conversation and a resume have it. What this call answers is the step's answer, checked without a retry.
      await services.writer.append(LogEventType.userMessage, { turnId: input.turnId, step: input.step }, { text: outputRetryMessage(input.outputRetry), steer: true, outputRetry: true });
      services.logger.info({ turnId: input.turnId, step: input.step, reason: input.outputRetry }, 'final answer does not match the outputSchema; asking once more');
      services.live.publish('retry', stepScope(services, input), { attempt: 2, maxAttempts: 2, delayMs: 0, error: { ...outputInvalidError(input.outputRetry), retryable: true }, model: input.request.model });
    }
    const value = await callChain(services, outputSchema ? { ...input, outputSchema } : input, signal);
    signal.throwIfAborted();
    const { text, usage, cost, model, finishReason, latencyMs, firstTokenMs } = value;
    // The last call at maxSteps was offered no tools: a call it asks for anyway is not made (nor left open in the log).
    const toolCalls = input.final ? [] : value.toolCalls;
    // A final answer of a typed turn is checked against its schema before it is logged, so the log says why it failed.
    const checked = outputSchema && toolCalls.length === 0 ? (await validatorOf(outputSchema, services.outputSchemas)).check(text) : undefined;
    await services.writer.append(LogEventType.assistantMessage, { turnId: input.turnId, step: input.step }, {
      text,
      toolCalls,
      usage,
      cost,
      model,
      finishReason,
      latencyMs,
      ...(firstTokenMs === undefined ? {} : { firstTokenMs }),
      ...(input.final ? { finalAnswer: true } : {}),
      ...(checked && !checked.ok ? { outputError: checked.message } : {}),
    });
    const planned: PlannedCall[] = toolCalls.map((call) => ({ ...call, tier: byName.get(call.name)?.tier ?? 'unknown' }));
    if (!checked) return { text, toolCalls: planned, usage, cost };
    if (checked.ok) return { text, toolCalls: [], usage, cost, output: checked.value };
    if (input.outputRetry !== undefined || outputRetried(services.transcript, input.turnId)) return { text, toolCalls: [], usage, cost, outputError: outputInvalidError(checked.message) };
    // Once per turn the step may ask again, with the same tools and this exchange appended; the machine decides whether
    // it does (not when the turn has no cost left). Without a retry the answer fails as it is.
    const messages = [...input.request.messages, { role: 'assistant' as const, content: text }, { role: 'user' as const, content: outputRetryMessage(checked.message) }];
    return {
      text,
      toolCalls: [],
      usage,
      cost,
      outputError: outputInvalidError(checked.message),
      outputRetry: { reason: checked.message, request: { ...input.request, messages } },
    };
  }
}
