import { fromPromise } from 'xstate';
import { DeadlineExceededError } from '../../../src/errors.ts';
import { LogEventType, MODEL_PATTERN, ZERO_USAGE, toErrorData } from '../../../src/protocol/index.ts';
import type { ToolSpec, Usage } from '../../../src/protocol/index.ts';
import { traceStep } from '../../../src/telemetry/index.ts';
import { contextWindowOf } from '../../../src/tokens.ts';
import type { TokenCounter } from '../../../src/tokens.ts';
import type { ChatMessage, MemoryHit } from '../../../src/protocol/index.ts';
import type { ConversationView } from '../context/conversation.ts';
import { memoryUnavailable, recallSection } from '../context/recall.ts';
import type { SessionScope } from './session-scope.ts';
import type { CompactInput, CompactOutput, PrepareInput, PrepareOutput } from '../../../machines/index.ts';
import { buildContext } from '../context/context-builder.ts';
import type { PreparedContext } from '../context/context-builder.ts';
import { stepChain } from '../models/model-chain.ts';
import { waitForService } from '../models/service-wait.ts';
import { countValidationFailures, decideModel } from '../models/model-escalation.ts';
import { forcedStep } from './forced-step.ts';
import { deadlineOf } from '../limits/limited-provider.ts';
import { outputInstruction } from '../../../src/output-schema.ts';
import { outputSchemaOf } from './turn-output.ts';
import { discoverTools } from './session-scope.ts';
import { activeProfile } from '../agents/step-profile.ts';
import type { StepActorDeps } from './session-scope.ts';

/** What the last call at `maxSteps` is told, after the conversation: it has no tools, and must answer now. */
export const FINAL_ANSWER_INSTRUCTION =
  'You have used every step this turn allows, and no more tools can run. Answer the request now, as well as you can from what you have found so far; say what is still missing.';

/**
 * The turn's actors that make a step's request: `prepare` appends pending steer messages, discovers the
 * tools, picks the step's model and builds the context (the last call at `maxSteps`, `final`, gets no tools and
 * an instruction to answer); `compact` summarizes the older history when `prepare` found it due, and appends
 * `summary.created` with the call's usage and cost (counted in the turn's), or `summary.failed`.
 */
export function createPrepareActors({ scopeOf, stepScope, progress }: Pick<StepActorDeps, 'scopeOf' | 'stepScope' | 'progress'>) {
  const prepare = fromPromise<PrepareOutput, PrepareInput>(async ({ input, signal, system }) => {
    const scope = scopeOf(system);
    const { services } = scope;
    // The turn's deadline timer may fire late on a busy node, after a tool's own timeout at the same deadline has
    // already brought the turn here: no step begins past the deadline.
    if (input.deadline !== undefined && services.now() >= input.deadline) {
      throw new DeadlineExceededError(`the turn passed its deadline at ${new Date(input.deadline).toISOString()} before step ${input.step} began`, { deadline: input.deadline });
    }
    traceStep(input.turnId, input.step);
    for (const { text, requestId } of services.takeSteers()) {
      await services.writer.append(LogEventType.userMessage, { turnId: input.turnId, step: input.step }, { text, steer: true, ...(requestId ? { requestId } : {}) });
    }
    return prepareStep(scope, input, signal);
  });

  /**
   * Builds the step's request from the session's transcript: recall, tool discovery, the step's model and the
   * context. Appends nothing: a dry run calls it on a scope of its own (see `SessionLogic.prepareDryRun`).
   */
  async function prepareStep(scope: SessionScope, input: PrepareInput, signal: AbortSignal): Promise<PrepareOutput> {
    const { services } = scope;
    const { transcript, config } = services;
    const history = transcript.conversation(input.turnId);
    // Memory is asked at the turn's first step, beside tool discovery, and what it recalls stays for the turn.
    const recalling = recallFor(scope, input, history, signal);
    // A prompt's `forceFinish`: its first step is offered no tools, and a call the model makes anyway runs as an
    // unknown tool. The last call at `maxSteps` (`final`) is offered none either.
    const finishing = !input.final && forcedStep(transcript, input.turnId, input.step)?.forceFinish === true;
    const { tools } = input.final || finishing ? { tools: [] } : await discoverTools(scope, signal, input.turnId);
    if (finishing) scope.tools = new Map();
    const specs: ToolSpec[] = tools.map(({ name, description, parameters }) => ({ name, description, parameters }));
    // A typed turn's model is told the schema its final answer must match; the budget keeps room for that.
    const outputSchema = outputSchemaOf(transcript, input.turnId);
    const outputSection: ChatMessage | undefined = outputSchema ? { role: 'system', content: outputInstruction(outputSchema) } : undefined;
    const toolTokens = services.toolTokens(specs) + (outputSection ? services.tokens.count(outputSection.content) : 0);
    const recallShare = services.memory ? config.recall.share : 0;
    // A turn run as an agent profile (its prompt's, or a handoff's) takes that profile's system prompt and model.
    const profile = activeProfile(services, input.turnId);
    const build = (model: string): PreparedContext => buildContext({
      model,
      history,
      tools: specs,
      toolTokens,
      tokens: services.tokens,
      options: {
        systemPrompt: profile?.systemPrompt ?? config.systemPrompt,
        // The share recall may take is kept out of the history's budget.
        contextWindow: Math.floor(contextWindowOf(model) * (1 - recallShare)),
        maxOutputTokens: config.maxOutputTokens,
      },
    });
    let stepModel = profile?.model ?? input.model;
    let prepared: PreparedContext;
    if (input.escalation && profile?.model === undefined) {
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
      prepared = build(stepModel);
    }
    scope.compactThroughSeq = prepared.compactThroughSeq;
    const [, ...fallbackModels] = stepChain(stepModel, input);
    const recalled = await recalling;
    const recalledMessages = recalled ? withRecall(prepared.request.messages, recalled, Math.floor(contextWindowOf(stepModel) * recallShare), services.tokens) : prepared.request.messages;
    const sectioned = outputSection ? withSystemSection(recalledMessages, outputSection) : recalledMessages;
    const messages = input.final ? [...sectioned, { role: 'user' as const, content: FINAL_ANSWER_INSTRUCTION }] : sectioned;
    const request = { ...prepared.request, messages, ...(fallbackModels.length > 0 ? { fallbackModels } : {}) };
    return { needsCompaction: prepared.needsCompaction && !input.compacted, request };
  }

  const compact = fromPromise<CompactOutput, CompactInput>(async ({ input, signal, system }) => {
    const scope = scopeOf(system);
    const { services } = scope;
    const { config } = services;
    const throughSeq = scope.compactThroughSeq;
    if (throughSeq === 0) return { usage: ZERO_USAGE, cost: 0 };
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
    // A provider nobody serves right now (not started yet, restarting) is waited for, as a step's own call is.
    const summarize = async (): Promise<{ summary: string; usage: Usage; cost: number; model: string }> => {
      let summary = '';
      let usage: Usage = ZERO_USAGE;
      let cost = 0;
      let model = input.model;
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
        { signal, idleTimeoutMs: config.providerIdleTimeoutMs, timeoutMs: config.providerTimeoutMs, ...deadlineOf(services.transcript, input) },
      )) {
        if (chunk.type === 'text-delta') summary += chunk.text;
        else if (chunk.type === 'retry') services.live.publish('retry', stepScope(services, input), { attempt: chunk.attempt, maxAttempts: chunk.maxAttempts, delayMs: chunk.delayMs, error: chunk.error, model: input.model });
        else if (chunk.type === 'usage') usage = chunk.usage;
        else if (chunk.type === 'done') {
          cost = chunk.cost ?? 0;
          // As in a step: only a full `<provider>:<model>` name says which model answered.
          if (chunk.model !== undefined && MODEL_PATTERN.test(chunk.model)) model = chunk.model;
        }
      }
      return { summary, usage, cost, model };
    };
    let summarized: Awaited<ReturnType<typeof summarize>>;
    try {
      summarized = await waitForService({
        call: summarize,
        waitMs: config.waitForServiceMs,
        signal,
        onWait: (wait) => {
          services.logger.warn({ turnId: input.turnId, step: input.step, model: input.model, attempt: wait.attempt, delayMs: wait.delayMs, error: wait.error }, 'no provider serves the model; waiting for one to summarize');
          services.live.publish('retry', stepScope(services, input), { ...wait, model: input.model });
        },
      });
    } catch (err) {
      // A cancelled turn's summary did not fail: the turn ended. Otherwise the log says why the step goes on without it.
      if (!signal.aborted) {
        services.logger.warn({ err, turnId: input.turnId, step: input.step }, 'summary failed; the step keeps the newest history that fits');
        await services.writer.append(LogEventType.summaryFailed, { turnId: input.turnId, step: input.step }, { throughSeq, model: input.model, error: toErrorData(err) });
      }
      throw err;
    }
    const { summary, usage, cost, model } = summarized;
    await services.writer.append(LogEventType.summaryCreated, { turnId: input.turnId, step: input.step }, {
      text: summary,
      throughSeq,
      tokens: services.tokens.count(summary),
      model,
      usage,
      cost,
    });
    return { usage, cost };
  });

  return { prepare, compact, prepareStep };

  /**
   * The snippets memory recalls for the turn's prompt: asked at its first step (a short timeout, the step's
   * signal), kept for its later steps. Memory down or slow costs the step nothing but a live `error` event.
   */
  async function recallFor(scope: SessionScope, input: PrepareInput, history: ConversationView, signal: AbortSignal): Promise<readonly MemoryHit[] | undefined> {
    const { services } = scope;
    const { memory, config } = services;
    if (!memory || config.recall.share <= 0) return undefined;
    if (scope.recalled?.turnId === input.turnId) return scope.recalled.hits;
    let query: string | undefined;
    for (let index = history.length - 1; index >= 0 && query === undefined; index--) {
      const message = history.message(index);
      if (message.role === 'user') query = message.content;
    }
    let hits: readonly MemoryHit[] = [];
    if (query?.trim()) {
      try {
        hits = await memory.recall(services.tenant, query, { signal, timeoutMs: config.recall.timeoutMs, k: config.recall.k, turnId: input.turnId });
      } catch (err) {
        if (signal.aborted) throw err;
        const data = memoryUnavailable(err, config.recall.timeoutMs);
        services.logger.warn({ err, turnId: input.turnId }, 'memory did not answer; the step goes on without it');
        services.live.publish('error', stepScope(services, input), data);
      }
    }
    scope.recalled = { turnId: input.turnId, hits };
    return hits;
  }
}

/** The request's messages with `section` after the leading system messages (system prompt, recall). */
function withSystemSection(messages: readonly ChatMessage[], section: ChatMessage): readonly ChatMessage[] {
  let at = 0;
  while (messages[at]?.role === 'system') at += 1;
  return [...messages.slice(0, at), section, ...messages.slice(at)];
}

/** The request's messages with the recall section after the system prompt, when any snippet is left to add. */
function withRecall(messages: readonly ChatMessage[], hits: readonly MemoryHit[], budget: number, tokens: TokenCounter): readonly ChatMessage[] {
  const section = recallSection(hits, messages, budget, tokens);
  if (!section) return messages;
  const at = messages[0]?.role === 'system' ? 1 : 0;
  return [...messages.slice(0, at), section, ...messages.slice(at)];
}
