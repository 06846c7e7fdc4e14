import { describe, expect, it } from 'vitest';
import { buildContext } from '../../services/runtime/context/context-builder.ts';
import { createConversationIndex } from '../../services/runtime/context/conversation.ts';
import type { ConversationIndex } from '../../services/runtime/context/conversation.ts';
import type { MessageSizes } from '../../services/runtime/context/conversation-fit.ts';
import { recallSection } from '../../services/runtime/context/recall.ts';
import { createTranscript } from '../../services/runtime/sessions/transcript.ts';
import type { ChatMessage, LogEvent, MemoryHit } from '../../src/protocol/index.ts';
import type { TokenCounter } from '../../src/tokens.ts';
import { createCharCounter } from '../helpers/log-events.ts';
import { createRandom, simulateArbitrarySession, simulateRuntimeSession } from '../helpers/random-log.ts';
import type { Random, SimulatedSession } from '../helpers/random-log.ts';
import { createBoundedCharCounter } from '../helpers/token-counters.ts';

/**
 * The conversation index keeps running totals as events are added (each message's size, their sum, how many
 * are still bounds, and the fits kept per budget, moved on by what was appended since) instead of walking the
 * history at every step. These tests replay random sessions (seeded, so a failure replays from its seed) and,
 * after every change and every question asked, recompute each of those totals from scratch over the index's
 * own messages with an exact counter: what is kept incrementally must equal the full recomputation.
 */

// The index is a `MessageSizes` (conversation-fit.ts): the test reads the sums it keeps, to recompute them.
const sizesOf = (index: ConversationIndex) => index as unknown as MessageSizes & { readonly seqs: readonly number[] };

/**
 * Every running total of `index` against a recomputation from its messages (`exact` counts, `counter` bounds):
 * the list of what differs, empty when all agree. Plain comparisons, one `expect` per call: this runs after
 * every event and every question.
 */
function totalsDiffer(index: ConversationIndex, counter: TokenCounter, exact: TokenCounter): string[] {
  const sizes = sizesOf(index);
  const { messages, tokens } = sizes;
  const wrong: string[] = [];
  if (tokens.length !== messages.length || sizes.seqs.length !== messages.length) wrong.push(`lengths ${messages.length}/${tokens.length}/${sizes.seqs.length}`);
  const exactCounts = messages.map((message) => exact.countMessage(message));
  let known = 0;
  let uncounted = 0;
  tokens.forEach((size, at) => {
    // Counted: the exact count. Not counted yet: minus the message's bound, never under its count.
    if (size >= 0 && size !== exactCounts[at]) wrong.push(`message ${at}: count ${size}, exactly ${exactCounts[at]}`);
    if (size < 0) {
      const bound = counter.boundMessage!(messages[at]!);
      if (-size !== bound || bound < exactCounts[at]!) wrong.push(`message ${at}: bound ${-size}, bound now ${bound}, count ${exactCounts[at]}`);
      uncounted += 1;
    }
    known += Math.abs(size);
  });
  if (sizes.known !== known) wrong.push(`running sum ${sizes.known}, recomputed ${known}`);
  if (sizes.uncounted !== uncounted) wrong.push(`bounds in the sum ${sizes.uncounted}, recomputed ${uncounted}`);
  const exactSum = (from: number, to: number) => {
    let sum = 0;
    for (let at = from; at < to; at++) sum += exactCounts[at]!;
    return sum;
  };
  const budgets = new Set<number>();
  for (const fit of sizes.fits ?? []) {
    const where = `fit of ${fit.budget} over [${fit.start}, ${fit.end})`;
    if (budgets.has(fit.budget)) wrong.push(`${where}: a second fit of its budget`);
    budgets.add(fit.budget);
    if (!(0 <= fit.start && fit.start <= fit.end && fit.end <= messages.length)) {
      wrong.push(`${where}: outside ${messages.length} messages`);
      continue;
    }
    let used = 0;
    let bounds = 0;
    for (let at = fit.start; at < fit.end; at++) {
      used += Math.abs(tokens[at]!);
      if (tokens[at]! < 0) bounds += 1;
    }
    if (fit.used !== used) wrong.push(`${where}: sum ${fit.used}, recomputed ${used}`);
    if (fit.uncounted !== bounds) wrong.push(`${where}: ${fit.uncounted} bounds in its sum, recomputed ${bounds}`);
    // The window is the longest run ending at `end` that fits, by exact counts.
    if (fit.start < fit.end && exactSum(fit.start, fit.end) > fit.budget) wrong.push(`${where}: over its budget by exact counts`);
    if (fit.start > 0 && exactSum(fit.start - 1, fit.end) <= fit.budget) wrong.push(`${where}: message ${fit.start - 1} fits too`);
  }
  if (budgets.size > 4) wrong.push(`${budgets.size} fits kept`);
  return wrong;
}

function expectTotalsRecomputed(index: ConversationIndex, counter: TokenCounter, exact: TokenCounter, context: string) {
  expect(totalsDiffer(index, counter, exact), context).toEqual([]);
}

const hit = (text: string): MemoryHit => ({ type: 'user.message', sessionId: 'other', text }) as MemoryHit;

const sessions: Record<string, (random: Random) => SimulatedSession> = {
  'as the runtime logs it, one prompt at a time': (random) => simulateRuntimeSession(random, { queuePrompts: false }),
  'as the runtime logs it, prompts queued while a turn runs (events inserted before later turns)': (random) => simulateRuntimeSession(random, { queuePrompts: true }),
  'written some other way': simulateArbitrarySession,
};
const budgets = [0, 2, 9, 30, 80, 240, 1_000];

describe('conversation running totals', () => {
  for (const [kind, simulate] of Object.entries(sessions)) {
    it(`equal a full recomputation after random appends, compactions and recalls: a session ${kind}`, () => {
      let questions = 0;
      for (let seed = 1; seed <= 20; seed++) {
        const random = createRandom(seed);
        const session = simulate(random);
        // The simulation reads a transcript to place its compactions; the index under test is fed the same events.
        const transcript = createTranscript([]);
        const counter = createBoundedCharCounter();
        const exact = createCharCounter();
        let index = createConversationIndex([], counter);
        for (let step = 0; step < 200; step++) {
          const events: LogEvent[] = session.advance(transcript);
          for (const event of events) {
            transcript.add(event);
            index.add(event);
            expectTotalsRecomputed(index, counter, exact, `seed ${seed}, step ${step}, after ${event.type}`);
          }
          // Now and then the session is taken over: an index built from the whole log starts its totals afresh.
          if (random.chance(0.02)) index = createConversationIndex(session.events, counter);
          // The questions Preparing asks, on random views and budgets; each may count messages and move fits.
          for (let ask = random.int(4); ask > 0; ask--) {
            const turns = session.turns();
            const turnId = random.chance(0.7) ? session.running() : turns.length === 0 ? undefined : random.pick(turns);
            const view = index.view(turnId);
            const context = `seed ${seed}, step ${step}, view of ${turnId}`;
            const roll = random.next();
            if (roll < 0.5) {
              const budget = random.pick(budgets);
              const window = budget + 4;
              const prepared = buildContext({ model: 'scripted:default', history: view, tools: [], toolTokens: 0, tokens: counter, options: { systemPrompt: 'sys', contextWindow: window, maxOutputTokens: 0, safetyRatio: 0 } });
              // Recall goes into what is sent, after the system prompt, never into the index (the runtime's withRecall
              // copies the window with the section in it). The window is a copy too: even a section inserted into it
              // in place leaves the index, and so the next preparation, as they were.
              const recalled = recallSection([hit(`fact ${step}`), hit('x')], prepared.request.messages, 50, counter);
              const sent = prepared.request.messages as ChatMessage[];
              if (recalled) sent.splice(1, 0, recalled);
              const again = buildContext({ model: 'scripted:default', history: index.view(turnId), tools: [], toolTokens: 0, tokens: counter, options: { systemPrompt: 'sys', contextWindow: window, maxOutputTokens: 0, safetyRatio: 0 } });
              expect(again.request.messages.length, context).toBe(prepared.request.messages.length - (recalled ? 1 : 0));
              expect(again.compactThroughSeq, context).toBe(prepared.compactThroughSeq);
            } else if (roll < 0.7) {
              view.fit(random.pick(budgets));
            } else if (roll < 0.85) {
              view.totalExceeds(random.int(2 * view.totalBound() + 2));
            } else if (roll < 0.95 && view.length > 0) {
              view.tokens(random.int(view.length));
            } else {
              expect(view.totalTokens(), context).toBe(Array.from({ length: view.length }, (_, at) => exact.countMessage(view.message(at))).reduce((sum, count) => sum + count, 0));
            }
            questions += 1;
            expectTotalsRecomputed(index, counter, exact, `${context}, after question ${roll.toFixed(2)}`);
          }
        }
        // The index kept in step holds what one built from the whole log holds.
        const rebuilt = sizesOf(createConversationIndex(session.events, counter));
        expect(sizesOf(index).messages, `seed ${seed}`).toEqual(rebuilt.messages);
        expect(sizesOf(index).seqs, `seed ${seed}`).toEqual(rebuilt.seqs);
      }
      expect(questions).toBeGreaterThan(1_000);
    });
  }

  it('moves its kept fits on by the messages appended, counting each new message at most once, at any history length', () => {
    const counter = createBoundedCharCounter();
    const exact = createCharCounter();
    const index = createConversationIndex([], counter);
    const random = createRandom(7);
    let seq = 0;
    const event = (type: string, data: Record<string, unknown>) => ({ v: 1, id: `e${seq}`, ts: 0, tenant: 't', sessionId: 's', turnId: 't1', step: 1, type, data, seq: ++seq }) as unknown as LogEvent;
    index.add(event('user.message', { text: 'go' }));
    const perStep: number[] = [];
    const kept = new Set<object>();
    for (let step = 0; step < 3_000; step++) {
      index.add(event('assistant.message', { text: 'y'.repeat(random.int(20)), toolCalls: [{ id: `c${step}`, name: 'lookup', args: {} }], usage: { inputTokens: 1, outputTokens: 1 }, cost: 0, model: 'm', finishReason: 'tool_calls' }));
      index.add(event('tool.result', { toolCallId: `c${step}`, name: 'lookup', output: 'z'.repeat(random.int(40)), isError: false, durationMs: 1 }));
      const before = counter.calls();
      const view = index.view('t1');
      view.fit(500);
      view.fit(250);
      perStep.push(counter.calls() - before);
      // The same kept fits, moved on to the new end: not walked again from the newest message.
      for (const fit of sizesOf(index).fits!) {
        expect(fit.end).toBe(view.length);
        kept.add(fit);
      }
      if (step % 500 === 0) expectTotalsRecomputed(index, counter, exact, `step ${step}`);
    }
    expectTotalsRecomputed(index, counter, exact, 'the end');
    // Two messages a step, each counted at most once whatever the history holds: no step counts its window again.
    expect(kept.size).toBe(2);
    const late = perStep.slice(-1_000);
    expect(Math.max(...late)).toBeLessThanOrEqual(4);
    expect(late.reduce((sum, count) => sum + count, 0) / late.length).toBeLessThanOrEqual(2);
  });
});
