import { describe, expect, it } from 'vitest';
import { buildContext } from '../../services/runtime/context/context-builder.ts';
import type { PreparedContext } from '../../services/runtime/context/context-builder.ts';
import type { ConversationFit, ConversationView } from '../../services/runtime/context/conversation.ts';
import { createTranscript } from '../../services/runtime/sessions/transcript.ts';
import type { ChatMessage, LogEvent } from '../../src/protocol/index.ts';
import type { TokenCounter } from '../../src/tokens.ts';
import { createCharCounter, createLogBuilder } from '../helpers/log-events.ts';
import { createRandom } from '../helpers/random-log.ts';
import type { Random } from '../helpers/random-log.ts';
import { createBoundedCharCounter } from '../helpers/token-counters.ts';

/**
 * Preparing after a step moves the kept fits on by what was appended and drops what fell off the front; it
 * does not walk the window again. These tests replay long histories (hundreds to thousands of messages, far
 * past the budget, as the bench's) and append random steps to one open turn, preparing after each step both
 * from the transcript kept in step and from scratch (a new transcript of the whole log, exact counts): the two
 * must give the same request, message for message, and the kept one must hand out the index's own message
 * objects, in a new array each time.
 */

// Only the system prompt ('sys', 4 tokens) is reserved: budget = window - 4.
const options = (budget: number) => ({ systemPrompt: 'sys', contextWindow: budget + 4, maxOutputTokens: 0, safetyRatio: 0 });

const build = (history: ConversationView, budget: number, tokens: TokenCounter): PreparedContext =>
  buildContext({ model: 'scripted:default', history, tools: [], toolTokens: 0, tokens, options: options(budget) });

const text = (random: Random, longest: number) => 'x'.repeat(1 + random.int(longest));

/** A log of whole turns holding at least `messages` chat messages, each turn a prompt, tool steps and an answer. */
function longHistory(random: Random, log: ReturnType<typeof createLogBuilder>, messages: number): LogEvent[] {
  const events: LogEvent[] = [];
  let count = 0;
  for (let turn = 0; count < messages; turn++) {
    const turnId = `t${turn}`;
    events.push(log.prompt(turnId, text(random, 60)));
    count += 1;
    for (let step = random.int(4); step > 0; step--) {
      const calls = Array.from({ length: 1 + random.int(3) }, (_, n) => ({ id: `c${turn}_${step}_${n}` }));
      events.push(log.answer(turnId, text(random, 30), calls));
      for (const call of calls) events.push(log.toolUse(turnId, call.id), log.result(turnId, call.id, text(random, 120)));
      count += 1 + calls.length;
    }
    events.push(log.answer(turnId, text(random, 80)), log.ended(turnId));
    count += 1;
  }
  return events;
}

/** One step of the open turn as the runtime logs it: an assistant message with its calls and their results, or a steer. */
function stepEvents(random: Random, log: ReturnType<typeof createLogBuilder>, turnId: string, step: number): LogEvent[] {
  if (random.chance(0.1)) return [log.steer(turnId, text(random, 40))];
  const calls = Array.from({ length: random.int(4) }, (_, n) => ({ id: `now${step}_${n}` }));
  const events = [log.answer(turnId, text(random, 30), calls)];
  for (const call of calls) events.push(log.toolUse(turnId, call.id), log.result(turnId, call.id, text(random, 200)));
  return events;
}

describe('context preparation after a step', () => {
  it('gives the request a walk from scratch gives, step after step, over long histories past the budget', () => {
    for (let seed = 1; seed <= 8; seed++) {
      const random = createRandom(seed);
      const log = createLogBuilder();
      const events = longHistory(random, log, random.pick([300, 1_200, 2_500]));
      events.push(log.prompt('now', text(random, 60)));
      const counter = createBoundedCharCounter();
      const transcript = createTranscript(events, counter);
      // The budget of the model and, now and then, of the one a step escalates to: each keeps its fit.
      const budgets = [random.pick([200, 900, 3_000]), random.pick([150, 1_500])];
      let previous: ChatMessage[] | undefined;
      for (let step = 0; step < 80; step++) {
        for (const event of stepEvents(random, log, 'now', step)) {
          events.push(event);
          transcript.add(event);
        }
        const fresh = createTranscript(events, createCharCounter()).conversation('now');
        for (const budget of random.chance(0.8) ? budgets.slice(0, 1) : budgets) {
          const context = `seed ${seed}, step ${step}, budget ${budget}, ${events.length} events`;
          const view = transcript.conversation('now');
          const built = build(view, budget, counter);
          const reference = build(fresh, budget, createCharCounter());
          const { historyTokens, ...decisions } = built;
          const { historyTokens: exactTokens, ...exactDecisions } = reference;
          expect(decisions, context).toEqual(exactDecisions);
          expect(historyTokens, context).toBeGreaterThanOrEqual(exactTokens);
          expect(historyTokens > built.budget, context).toBe(exactTokens > reference.budget);
          // The window is the index's own messages, in order, after the system prompt: no message is copied.
          const sent = built.request.messages;
          const first = view.length - (sent.length - 1);
          expect(view.resultsFollowCalls, context).toBe(true);
          sent.slice(1).forEach((message, at) => expect(message, `${context}, message ${at}`).toBe(view.message(first + at)));
          // A new array every time, so a caller may change it (recall inserts a section) without changing the next.
          expect(sent, context).not.toBe(previous);
          previous = sent as ChatMessage[];
          previous.splice(1, 0, { role: 'user', content: 'recalled' });
        }
      }
    }
  });

  it('counts each new message at most once and never a message of the window again, whatever the history', () => {
    for (const messages of [300, 3_000, 12_000]) {
      const random = createRandom(messages);
      const log = createLogBuilder();
      const events = longHistory(random, log, messages);
      events.push(log.prompt('now', 'go'));
      const counter = createBoundedCharCounter();
      const transcript = createTranscript(events, counter);
      // The system prompt is counted by a counter of its own, so `counter` sees only history messages.
      const system = createCharCounter();
      build(transcript.conversation('now'), 900, system);
      let added = 0;
      const before = counter.calls();
      for (let step = 0; step < 200; step++) {
        for (const event of stepEvents(random, log, 'now', step)) {
          transcript.add(event);
          if (event.type !== 'tool.use') added += 1;
        }
        build(transcript.conversation('now'), 900, system);
      }
      // The same bound at every history length: the messages appended, not the window nor the history.
      expect(counter.calls() - before, `${messages} messages`).toBeLessThanOrEqual(added);
    }
  });
});

/**
 * `counter` with a `later` that queues work until the test runs it, as the runtime's counter does until the
 * event loop is free (the step's request sent): `run` takes the queued counts, as many rounds as they queue.
 * A character count is at least 1 a message (`minMessageTokens`), so a long history's total is settled unread.
 */
function countingLater(counter: TokenCounter): { counter: TokenCounter; queued: () => number; run: () => void } {
  const queue: Array<() => void> = [];
  return {
    counter: { ...counter, minMessageTokens: 1, later: (work) => queue.push(work) },
    queued: () => queue.length,
    run: () => {
      while (queue.length > 0) queue.shift()!();
    },
  };
}

/** Exact tokens of messages `[from, to)` of a view counted exactly. */
function exactSum(view: ConversationView, from: number, to: number): number {
  let sum = 0;
  for (let at = from; at < to; at++) sum += view.tokens(at);
  return sum;
}

describe('context preparation after a step, with counts taken later', () => {
  it('never passes the budget, is short by less than the slack, and is exact once the counts were taken', () => {
    let shortSeen = 0;
    let refits = 0;
    for (let seed = 1; seed <= 8; seed++) {
      const random = createRandom(100 + seed);
      const log = createLogBuilder();
      const events = longHistory(random, log, random.pick([30, 300, 1_200]));
      events.push(log.prompt('now', text(random, 60)));
      const bounded = createBoundedCharCounter();
      const { counter, queued, run } = countingLater(bounded);
      const transcript = createTranscript(events, counter);
      const total = createTranscript(events, createCharCounter()).conversation('now').totalTokens();
      // Budgets past the history, and around its size at first (within it, then over it as it grows).
      const budget = random.pick([200, 900, 3_000, total, total + 150]);
      const ratio = random.pick([0.01, 0.1, 0.3]);
      const slack = Math.floor(budget * ratio);
      const buildWith = (view: ConversationView, tokens: TokenCounter) =>
        buildContext({ model: 'scripted:default', history: view, tools: [], toolTokens: 0, tokens, options: { ...options(budget), uncountedRatio: ratio } });
      for (let step = 0; step < 80; step++) {
        // Most steps, the counts queued by the last Preparing ran while the model answered; now and then not.
        if (random.chance(0.8)) run();
        for (const event of stepEvents(random, log, 'now', step)) {
          events.push(event);
          transcript.add(event);
        }
        const fresh = createTranscript(events, createCharCounter()).conversation('now');
        const context = `seed ${seed}, step ${step}, budget ${budget}, slack ${slack}, ${events.length} events`;
        const view = transcript.conversation('now');
        // The fit of the budget Preparing used (its last, when it asked again).
        let fit: ConversationFit | undefined;
        const recording: ConversationView = {
          summary: view.summary,
          length: view.length,
          resultsFollowCalls: view.resultsFollowCalls,
          message: (index) => view.message(index),
          seq: (index) => view.seq(index),
          summaryCut: (throughSeq) => view.summaryCut(throughSeq),
          tokens: (index) => view.tokens(index),
          totalTokens: () => view.totalTokens(),
          totalBound: () => view.totalBound(),
          totalExceeds: (limit) => view.totalExceeds(limit),
          fit: (asked, slackAsked) => {
            const answer = view.fit(asked, slackAsked);
            if (asked === budget) fit = answer;
            return answer;
          },
          messages: (start, head) => view.messages(start, head),
        };
        const built = buildWith(recording, counter);
        const reference = buildWith(fresh, createCharCounter());
        // The same budget; compaction and the model choice are exact.
        expect(built.budget, context).toBe(reference.budget);
        expect(built.needsCompaction, context).toBe(reference.needsCompaction);
        expect(built.historyTokens, context).toBeGreaterThanOrEqual(reference.historyTokens);
        expect(built.historyTokens > built.budget, context).toBe(reference.historyTokens > reference.budget);
        // The window: never over budget (but for the newest message alone), never longer than the exact one,
        // and short of it by less than the slack besides one message.
        if (!fit) throw new Error(`${context}: no fit of the budget asked`);
        const exact = fresh.fit(budget);
        const end = view.length;
        expect(fit.start, context).toBeGreaterThanOrEqual(exact.start);
        if (fit.start < end) expect(exactSum(fresh, fit.start, end), context).toBeLessThanOrEqual(budget);
        if (fit.short) {
          shortSeen += 1;
          if (fit.start > exact.start + 1) expect(exactSum(fresh, exact.start, fit.start - 1), context).toBeLessThan(slack);
        } else {
          expect(fit.start, context).toBe(exact.start);
        }
        const sent = built.request.messages;
        const first = end - (sent.length - 1);
        expect(first, context).toBeGreaterThanOrEqual(Math.min(fit.start, end - 1));
        sent.slice(1).forEach((message, at) => expect(message, `${context}, message ${at}`).toBe(view.message(first + at)));
        // Once the queued counts ran (the runtime: while the model answers), the same step prepares as exact
        // counts do, to the message and the compaction's cut.
        let rebuilt = built;
        while (queued() > 0) {
          run();
          refits += 1;
          rebuilt = buildWith(transcript.conversation('now'), counter);
        }
        const { historyTokens, ...decisions } = rebuilt;
        const { historyTokens: exactTokens, ...exactDecisions } = reference;
        expect(decisions, `${context}, counted`).toEqual(exactDecisions);
        expect(historyTokens > rebuilt.budget, context).toBe(exactTokens > reference.budget);
      }
    }
    // The slack was used, and taken back.
    expect(shortSeen).toBeGreaterThan(50);
    expect(refits).toBeGreaterThan(50);
  });

  it('counts nothing on the path of a step whose new messages fit in the slack, and each of them later, once', () => {
    for (const messages of [300, 3_000, 12_000]) {
      const random = createRandom(messages);
      const log = createLogBuilder();
      const events = longHistory(random, log, messages);
      events.push(log.prompt('now', 'go'));
      const bounded = createBoundedCharCounter();
      const { counter, run } = countingLater(bounded);
      const transcript = createTranscript(events, counter);
      const system = createCharCounter();
      const build = () =>
        buildContext({ model: 'scripted:default', history: transcript.conversation('now'), tools: [], toolTokens: 0, tokens: system, options: { ...options(3_000), uncountedRatio: 0.05 } });
      build();
      run();
      let added = 0;
      let onPath = 0;
      const before = bounded.calls();
      for (let step = 0; step < 200; step++) {
        // A short answer and one short result: bounds of at most 2 × 41 + 3 each, within the 150-token slack.
        const id = `small${step}`;
        for (const event of [log.answer('now', text(random, 10), [{ id }]), log.toolUse('now', id), log.result('now', id, text(random, 40))]) {
          transcript.add(event);
          if (event.type !== 'tool.use') added += 1;
        }
        const counted = bounded.calls();
        const built = build();
        onPath += bounded.calls() - counted;
        expect(built.needsCompaction, `${messages} messages, step ${step}`).toBe(true);
        run();
      }
      expect(onPath, `${messages} messages`).toBe(0);
      expect(bounded.calls() - before, `${messages} messages`).toBeLessThanOrEqual(added);
      // And the window is exact again after each step's counts: at most a few messages short.
      expect(bounded.calls() - before, `${messages} messages`).toBeGreaterThan(0);
    }
  });
});

describe('whether a history passes a limit', () => {
  it('is answered exactly with the fewest tokens a message counts standing in for the messages not counted', () => {
    for (let seed = 1; seed <= 20; seed++) {
      const random = createRandom(500 + seed);
      const log = createLogBuilder();
      // Short messages (1 to 3 characters: 2 to 4 tokens), so that a lower bound of a few tokens each decides.
      const events: LogEvent[] = [];
      for (let turn = 0; turn < 40; turn++) events.push(log.prompt(`t${turn}`, text(random, 2)), log.answer(`t${turn}`, text(random, 2)), log.ended(`t${turn}`));
      const total = createTranscript(events, createCharCounter()).conversation().totalTokens();
      // Around the lower bound with nothing counted (80 messages, 2 tokens each) and around the total.
      for (const limit of [0, 159, 160, 161, total - 1, total, total + 1, random.int(total + 10)]) {
        // A new transcript for each question: the answer to one counts messages the next would then know.
        const counter: TokenCounter = { ...createBoundedCharCounter(), minMessageTokens: 2 };
        const view = createTranscript(events, counter).conversation();
        expect(view.totalExceeds(limit), `seed ${seed}, limit ${limit} of ${total}`).toBe(total > limit);
      }
    }
  });
});
