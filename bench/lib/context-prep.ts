import { LogEventType, createEnvelopeFactory } from '../../src/protocol/index.ts';
import type { EventDataMap, LogEvent } from '../../src/protocol/index.ts';
import { contextWindowOf } from '../../src/tokens.ts';
import type { TokenCounter } from '../../src/tokens.ts';
import { buildContext } from '../../services/runtime/context/context-builder.ts';
import { createTranscript } from '../../services/runtime/sessions/transcript.ts';
import { DEFAULT_RUNTIME_CONFIG } from '../../services/runtime/config.ts';
import { STEPS, TOOL_NAME, lookup } from './workload.ts';
import { now, summarize } from './stats.ts';
import type { Summary } from './stats.ts';

/** Preparing time of one step at a history length. */
export interface ContextPrepResult {
  readonly messages: number;
  /** History messages that fitted the model's budget and went into the request (the prompt not counted). */
  readonly kept: number;
  /** The first preparation, token counts not cached yet (ms). */
  readonly coldMs: number;
  /** Every later preparation with nothing new logged, token counts cached as the runtime caches them (ms). */
  readonly warmMs: Summary;
  /**
   * Preparation after one more step was logged, as a step sees it: an assistant message with one tool call
   * and its result (ms). The history grows by two messages per sample. Counts it leaves for later (see
   * `laterMs`) are not in it.
   */
  readonly stepMs: Summary;
  /**
   * Exact token counts taken per step sample, on average, on Preparing's path (the system prompt's, kept per
   * text, not included): 0 while the bounds of the history fit under the compaction trigger; at its budget,
   * 0 too while the step's new messages take at most `uncountedRatio` (1%) of the budget by their bounds, and
   * about one per new message past that. A count of a short message costs several µs, most of a step at that size.
   */
  readonly countsPerStep: number;
  /**
   * Of each step sample, the counts Preparing left for later (`TokenCounter.later`, which the runtime runs when
   * the event loop is free, after the step's request went out, while the model answers): taken right after
   * the sample, timed apart (ms), and how many per step. The CPU a step costs is `stepMs` plus this.
   */
  readonly laterMs: Summary;
  readonly laterCountsPerStep: number;
  /**
   * Of each step sample, the time spent in those exact counts (ms): the tokenizer's share, which a history
   * whose bounds fit never pays. Timed around each count, so a sample that counts also pays two clock reads.
   */
  readonly countingMs: Summary;
  /** Each step sample less its counting time (ms): what the fit, the compaction check and the window's slice cost. */
  readonly stepLessCountingMs: Summary;
}

/** A session log of workload turns holding at least `messages` chat messages, plus one open turn's prompt. */
function history(messages: number): { events: LogEvent[]; turnId: string } {
  let seq = 0;
  let id = 0;
  const envelopes = createEnvelopeFactory({ newId: () => `e${id++}`, now: () => 1_700_000_000_000 + seq });
  const events: LogEvent[] = [];
  const add = <T extends LogEventType>(type: T, turnId: string, step: number, data: EventDataMap[T]) => {
    events.push({ ...envelopes.create(type, { tenant: 'bench', sessionId: 's', turnId, step }, data), seq: ++seq } as LogEvent);
  };
  let count = 0;
  let turn = 0;
  const usage = { inputTokens: 100, outputTokens: 20 };
  while (count < messages) {
    const turnId = `t${turn++}`;
    add(LogEventType.userMessage, turnId, 0, { text: `Question ${turn}: look up a few values and tell me what they add up to.` });
    count += 1;
    STEPS.forEach((step, index) => {
      if (count >= messages) return;
      const toolCalls = step.toolCalls.map((call, n) => ({ id: `c${turn}_${index}_${n}`, name: call.name, args: { ...call.args } }));
      add(LogEventType.assistantMessage, turnId, index + 1, { text: step.text, toolCalls, usage, cost: 0, model: DEFAULT_RUNTIME_CONFIG.defaultModel, finishReason: toolCalls.length ? 'tool_calls' : 'stop' });
      count += 1;
      for (const call of toolCalls) {
        add(LogEventType.toolUse, turnId, index + 1, { toolCallId: call.id, effectId: `s:${turnId}:${call.id}`, name: TOOL_NAME, args: call.args, tier: 'read_only' });
      }
      for (const call of toolCalls) {
        if (count >= messages) return;
        const output = `${lookup(call.args.key)}; ${'the record reads as expected, nothing unusual in it. '.repeat(3)}`;
        add(LogEventType.toolResult, turnId, index + 1, { toolCallId: call.id, name: TOOL_NAME, output, isError: false, durationMs: 1 });
        count += 1;
      }
    });
    add(LogEventType.turnEnded, turnId, STEPS.length, { reason: 'yielded', text: STEPS.at(-1)!.text, usage, cost: 0, steps: STEPS.length });
  }
  const turnId = `t${turn}`;
  add(LogEventType.userMessage, turnId, 0, { text: 'And once more, please.' });
  return { events, turnId };
}

/**
 * `counter` with exact counts that cost next to nothing: a quarter of the message's byte bound (never over it).
 * Timing Preparing with it leaves out the tokenizer and shows what the fit, the compaction check and the window's
 * slice cost on their own. Its counts are not a tokenizer's: for this measurement only.
 */
export function withFreeCounts(counter: TokenCounter): TokenCounter {
  const bound = counter.boundMessage;
  if (!bound) throw new Error('withFreeCounts needs a counter with a bound');
  return {
    ...counter,
    countMessage: (message) => (message.role === 'system' ? counter.countMessage(message) : Math.ceil(bound(message) / 4)),
  };
}

/**
 * The counter's `later` as a queue the measurement runs itself, after each timed preparation: in the runtime the
 * queued counts run once the event loop is free (after the step's request went out); here no loop turns between
 * samples, and they are timed apart.
 */
function laterQueue(): { later: (work: () => void) => void; run: () => void } {
  const queue: Array<() => void> = [];
  return {
    later: (work) => queue.push(work),
    run: () => {
      while (queue.length > 0) queue.shift()!();
    },
  };
}

/** Preparations run untimed before any size is measured, so that no size is timed on code still being optimized. */
const JIT_WARMUP = 2_000;

/**
 * Times Preparing as the runtime's `prepare` actor runs it: `transcript.conversation()` then
 * `buildContext()`, token counts kept by the transcript (taken once per message, on first use). Warm samples
 * log nothing new in between; step samples log one step (an assistant message asking for one tool call, its
 * `tool.use` and its result) before each, the way a turn goes from one Preparing to the next.
 *
 * `model` (default: the runtime's default model, a 32,000-token window) sets the budget. Token counts are
 * taken only where bounds cannot decide, so a history whose bounds fit under the compaction trigger is never
 * counted, and one over its budget counts each new message: on Preparing's path past `uncountedRatio` of the
 * budget (default 0.01, as the runtime's; 0 counts them all there), after it otherwise (`laterMs`). Pass a
 * large-window model to time a history that fits at every size.
 */
export function measureContextPrep(
  counter: TokenCounter,
  sizes: readonly number[],
  iterations: number,
  options: { model?: string; uncountedRatio?: number } = {},
): ContextPrepResult[] {
  // The counter as given, but for a tally of the exact counts of history messages and the time they take (the
  // system prompt's count, kept per text by the counter, is neither).
  let counts = 0;
  let countingMs = 0;
  const queue = laterQueue();
  const tokens: TokenCounter = {
    ...counter,
    later: queue.later,
    countMessage: (message) => {
      if (message.role === 'system') return counter.countMessage(message);
      counts += 1;
      const t = now();
      try {
        return counter.countMessage(message);
      } finally {
        countingMs += now() - t;
      }
    },
  };
  const model = options.model ?? DEFAULT_RUNTIME_CONFIG.defaultModel;
  const tools = [{ name: TOOL_NAME, description: 'Looks up the value of a key.', parameters: { type: 'object', properties: { key: { type: 'string' } }, required: ['key'] } }];
  const toolTokens = tokens.count(JSON.stringify(tools));
  const session = (size: number) => {
    const { events, turnId } = history(size);
    const transcript = createTranscript(events, tokens);
    let seq = events.at(-1)!.seq!;
    let step = 0;
    const envelopes = createEnvelopeFactory({ newId: () => `s${seq}`, now: () => 1_800_000_000_000 + seq });
    const add = <T extends LogEventType>(type: T, data: EventDataMap[T]) =>
      transcript.add({ ...envelopes.create(type, { tenant: 'bench', sessionId: 's', turnId, step }, data), seq: ++seq } as LogEvent);
    const usage = { inputTokens: 100, outputTokens: 20 };
    return {
      transcript,
      prepare: () =>
        buildContext({
          model,
          history: transcript.conversation(turnId),
          tools,
          toolTokens,
          tokens,
          options: {
            systemPrompt: DEFAULT_RUNTIME_CONFIG.systemPrompt,
            contextWindow: contextWindowOf(model),
            maxOutputTokens: DEFAULT_RUNTIME_CONFIG.maxOutputTokens,
            ...(options.uncountedRatio === undefined ? {} : { uncountedRatio: options.uncountedRatio }),
          },
        }),
      /** Logs one step of the open turn. */
      logStep: () => {
        step += 1;
        const id = `next${step}`;
        const key = STEPS[0]!.toolCalls[step % 2]!.args.key;
        add(LogEventType.assistantMessage, { text: `Step ${step}: one more look.`, toolCalls: [{ id, name: TOOL_NAME, args: { key } }], usage, cost: 0, model, finishReason: 'tool_calls' });
        add(LogEventType.toolUse, { toolCallId: id, effectId: `s:${turnId}:${id}`, name: TOOL_NAME, args: { key }, tier: 'read_only' });
        add(LogEventType.toolResult, { toolCallId: id, name: TOOL_NAME, output: `${lookup(key)}; ${'the record reads as expected. '.repeat(2)}${step}`, isError: false, durationMs: 1 });
      },
      turnId,
    };
  };
  // A short history, then one long enough to ask for compaction, so both paths are optimized.
  for (const warmup of [session(10), session(1_000)]) {
    for (let i = 0; i < JIT_WARMUP; i++) {
      if (i % 10 === 0) warmup.logStep();
      warmup.prepare();
      queue.run();
    }
  }
  return sizes.map((size) => {
    const { transcript, prepare, logStep, turnId } = session(size);
    const t0 = now();
    const first = prepare();
    const coldMs = now() - t0;
    queue.run();
    const messages = transcript.conversation(turnId).length - 1;
    const warm: number[] = [];
    for (let i = 0; i < iterations; i++) {
      const t = now();
      prepare();
      warm.push(now() - t);
      queue.run();
    }
    const steps: number[] = [];
    const counting: number[] = [];
    const lessCounting: number[] = [];
    const later: number[] = [];
    let onPath = 0;
    let afterwards = 0;
    for (let i = 0; i < iterations; i++) {
      logStep();
      const countedBefore = countingMs;
      const countsBefore = counts;
      const t = now();
      prepare();
      const took = now() - t;
      steps.push(took);
      counting.push(countingMs - countedBefore);
      lessCounting.push(took - (countingMs - countedBefore));
      onPath += counts - countsBefore;
      const queuedFrom = counts;
      const t1 = now();
      queue.run();
      later.push(now() - t1);
      afterwards += counts - queuedFrom;
    }
    const countsPerStep = iterations > 0 ? onPath / iterations : 0;
    return {
      messages,
      kept: first.request.messages.length - 2,
      coldMs,
      warmMs: summarize(warm),
      stepMs: summarize(steps),
      countsPerStep,
      laterMs: summarize(later),
      laterCountsPerStep: iterations > 0 ? afterwards / iterations : 0,
      countingMs: summarize(counting),
      stepLessCountingMs: summarize(lessCounting),
    };
  });
}
