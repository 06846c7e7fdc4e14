import { describe, expect, it } from 'vitest';
import { buildContext } from '../../services/runtime/context/context-builder.ts';
import type { PreparedContext } from '../../services/runtime/context/context-builder.ts';
import { decideModel } from '../../services/runtime/models/model-escalation.ts';
import { createTranscript } from '../../services/runtime/sessions/transcript.ts';
import type { ChatMessage, LogEvent } from '../../src/protocol/index.ts';
import { createTokenCounter } from '../../src/tokens.ts';
import type { TokenCounter } from '../../src/tokens.ts';
import type { ConversationView } from '../../services/runtime/context/conversation.ts';
import { createCharCounter, createLogBuilder } from '../helpers/log-events.ts';
import { createRandom, randomText, simulateArbitrarySession, simulateRuntimeSession } from '../helpers/random-log.ts';
import { createBoundedCharCounter, exactOnly } from '../helpers/token-counters.ts';
import type { Random } from '../helpers/random-log.ts';

// A window where the system prompt ('sys', 4 tokens) and nothing else is reserved: budget = window - 4.
const options = (budget: number) => ({ systemPrompt: 'sys', contextWindow: budget + 4, maxOutputTokens: 0, safetyRatio: 0 });

function prepare(events: LogEvent[], turnId: string, budget: number, counter = createCharCounter()) {
  const transcript = createTranscript(events, counter);
  return buildContext({ model: 'scripted:default', history: transcript.conversation(turnId), tools: [], toolTokens: 0, tokens: counter, options: options(budget) });
}

const history = (context: ReturnType<typeof prepare>) => context.request.messages.slice(1).map((message) => message.content);

describe('buildContext', () => {
  it('keeps the newest messages that fit the budget, after the system prompt', () => {
    const log = createLogBuilder();
    // Each message costs its length + 1: 'aaaa' = 5, 'bbbb' = 5, 'cccc' = 5.
    const context = prepare([log.prompt('t1', 'aaaa'), log.answer('t1', 'bbbb'), log.prompt('t2', 'cccc')], 't2', 10);
    expect(context.request.messages[0]).toEqual({ role: 'system', content: 'sys' });
    expect(history(context)).toEqual(['bbbb', 'cccc']);
    expect(context.historyTokens).toBe(15);
    expect(context.budget).toBe(10);
  });

  it('always keeps the newest message, even when it alone is over the budget', () => {
    const log = createLogBuilder();
    const context = prepare([log.prompt('t1', 'short'), log.prompt('t2', 'a very long prompt indeed')], 't2', 5);
    expect(history(context)).toEqual(['a very long prompt indeed']);
  });

  it('drops a tool result whose call was cut off, so the model sees a whole transcript', () => {
    const log = createLogBuilder();
    const events = [log.prompt('t1', 'question'), log.answer('t1', 'calling', [{ id: 'c1' }]), log.result('t1', 'c1', 'r'), log.answer('t1', 'ok')];
    // 'r' (2) + 'ok' (3) fit; 'calling' (8) does not, so its result goes too.
    const context = prepare(events, 't1', 6);
    expect(history(context)).toEqual(['ok']);
  });

  it('prepares a warm step from the kept fit and one slice, counting only the new messages', () => {
    const log = createLogBuilder();
    const counter = createCharCounter();
    const events: LogEvent[] = [];
    for (let turn = 0; turn < 500; turn++) events.push(log.prompt(`t${turn}`, 'qqqq'), log.answer(`t${turn}`, 'aaaa'));
    events.push(log.prompt('now', 'last'));
    const transcript = createTranscript(events, counter);
    // The system prompt is counted by a counter of its own, so `counter` sees only history messages.
    const build = (history: ConversationView) => buildContext({ model: 'scripted:default', history, tools: [], toolTokens: 0, tokens: createCharCounter(), options: options(50) });
    const cold = build(transcript.conversation('now'));
    expect(cold.historyTokens).toBe(1001 * 5);
    const counted = counter.calls();
    const reads = { message: 0, tokens: 0 };
    const spy = (view: ConversationView): ConversationView => ({
      summary: view.summary,
      length: view.length,
      resultsFollowCalls: view.resultsFollowCalls,
      message: (index) => (reads.message++, view.message(index)),
      seq: (index) => view.seq(index),
      summaryCut: (throughSeq) => view.summaryCut(throughSeq),
      tokens: (index) => (reads.tokens++, view.tokens(index)),
      totalTokens: () => view.totalTokens(),
      totalBound: () => view.totalBound(),
      totalExceeds: (limit) => view.totalExceeds(limit),
      fit: (budget) => view.fit(budget),
      messages: (start, head) => view.messages(start, head),
    });
    const warm = build(spy(transcript.conversation('now')));
    expect(warm).toEqual(cold);
    expect(counter.calls()).toBe(counted);
    // Only the first message of the window is looked at, to see whether it is a result that lost its call.
    expect(reads).toEqual({ message: 1, tokens: 0 });
    transcript.add(log.answer('now', 'call', [{ id: 'c1' }]));
    transcript.add(log.result('now', 'c1', 'rrrr'));
    const step = build(spy(transcript.conversation('now')));
    expect(counter.calls()).toBe(counted + 2);
    expect(step.historyTokens).toBe(1001 * 5 + 5 + 5);
    expect(history(step)).toEqual(['aaaa', 'qqqq', 'aaaa', 'qqqq', 'aaaa', 'qqqq', 'aaaa', 'last', 'call', 'rrrr']);
  });

  it('asks for compaction past the trigger and cuts so the rest fits in half the budget', () => {
    const log = createLogBuilder();
    // Five messages of 5 tokens each (seqs 1..5), budget 20: 25 > 16 triggers; the newest two (10) fit in 10.
    const events = [log.prompt('t1', 'aaaa'), log.answer('t1', 'bbbb'), log.prompt('t2', 'cccc'), log.answer('t2', 'dddd'), log.prompt('t3', 'eeee')];
    const context = prepare(events, 't3', 20);
    expect(context.needsCompaction).toBe(true);
    expect(context.compactThroughSeq).toBe(3);
  });

  it('does not compact a history under the trigger', () => {
    const log = createLogBuilder();
    const context = prepare([log.prompt('t1', 'aaaa'), log.answer('t1', 'bbbb'), log.prompt('t2', 'cccc')], 't2', 100);
    expect(context.needsCompaction).toBe(false);
    expect(context.compactThroughSeq).toBe(0);
  });

  it('puts the summary in the system prompt and leaves out what it covers', () => {
    const log = createLogBuilder();
    const events = [log.prompt('t1', 'aaaa'), log.answer('t1', 'bbbb'), log.prompt('t2', 'cccc'), log.summary('t2', 'they said a and b', 2)];
    const context = prepare(events, 't2', 100);
    expect(context.request.messages[0]?.content).toContain('Summary of the earlier conversation:\nthey said a and b');
    expect(history(context)).toEqual(['cccc']);
  });

  it('orders a queued prompt after the running turn and leaves it out of that turn’s context', () => {
    const log = createLogBuilder();
    const events = [log.prompt('t1', 'q1'), log.prompt('t2', 'q2'), log.answer('t1', 'a1', [{ id: 'c1' }]), log.result('t1', 'c1', 'r1')];
    expect(history(prepare(events, 't1', 100))).toEqual(['q1', 'a1', 'r1']);
    expect(history(prepare(events, 't2', 100))).toEqual(['q1', 'a1', 'r1', 'q2']);
  });

  it('drops every leading result of a window whose call was cut off, and nothing after them', () => {
    const log = createLogBuilder();
    const events = [log.prompt('t1', 'question'), log.answer('t1', 'calling', [{ id: 'c1' }, { id: 'c2' }]), log.result('t1', 'c1', 'r1'), log.result('t1', 'c2', 'r2'), log.answer('t1', 'ok', [{ id: 'c3' }]), log.result('t1', 'c3', 'r3')];
    // r1, r2, ok, r3 fit (3 + 3 + 3 + 3); 'calling' (8) does not.
    expect(history(prepare(events, 't1', 12))).toEqual(['ok', 'r3']);
    expect(history(prepare(events, 't1', 20))).toEqual(['calling', 'r1', 'r2', 'ok', 'r3']);
  });

  it('drops the results a summary left without their call', () => {
    const log = createLogBuilder();
    const events = [log.prompt('t1', 'question'), log.answer('t1', 'calling', [{ id: 'c1' }, { id: 'c2' }]), log.result('t1', 'c1', 'r1'), log.result('t1', 'c2', 'r2'), log.answer('t1', 'ok')];
    events.push(log.summary('t1', 'asked, called', 2));
    expect(history(prepare(events, 't1', 100))).toEqual(['ok']);
  });

  it('sends only the system prompt when the newest message is a result whose call does not fit', () => {
    const log = createLogBuilder();
    const events = [log.prompt('t1', 'question'), log.answer('t1', 'calling', [{ id: 'c1' }]), log.result('t1', 'c1', 'a long result')];
    expect(history(prepare(events, 't1', 5))).toEqual([]);
  });

  it('drops a result whose call is not in the window even where other messages come first, when the log put it there', () => {
    const log = createLogBuilder();
    const events = [
      log.prompt('t1', 'q1'),
      log.answer('t1', 'a1', [{ id: 'c1' }]),
      log.result('t1', 'c1', 'r1'),
      log.answer('t1', 'done'),
      log.ended('t1'),
      log.prompt('t2', 'q2'),
      // Not as the runtime logs: a result for a call no assistant message of the window asked for.
      log.result('t2', 'c9', 'stray'),
      log.answer('t2', 'a2'),
    ];
    const transcript = createTranscript(events, createCharCounter());
    const view = transcript.conversation();
    expect(view.resultsFollowCalls).toBe(false);
    const context = buildContext({ model: 'scripted:default', history: view, tools: [], toolTokens: 0, tokens: createCharCounter(), options: options(100) });
    expect(history(context)).toEqual(['q1', 'a1', 'r1', 'done', 'q2', 'a2']);
  });

  const budgets = [0, 3, 10, 25, 60, 150, 400, 10_000];
  const sessions = {
    'a session as the runtime logs it, one prompt at a time': (random: Random) => simulateRuntimeSession(random, { queuePrompts: false }),
    'a session as the runtime logs it, prompts queued while a turn runs': (random: Random) => simulateRuntimeSession(random, { queuePrompts: true }),
    'a log written some other way': simulateArbitrarySession,
  };
  const counters = {
    'counted exactly': createCharCounter,
    'bounded, counted where it matters': createBoundedCharCounter,
  };
  for (const [kind, simulate] of Object.entries(sessions)) {
    for (const [counting, createCounter] of Object.entries(counters)) {
      it(`gives the context a walk from scratch over exact counts gives, step after step: ${kind}, ${counting}`, () => {
        const counter = createCounter();
        const exact = createCharCounter();
        const build = (history: ConversationView, budget: number) =>
          buildContext({ model: 'scripted:default', history, tools: [], toolTokens: 0, tokens: counter, options: options(budget) });
        for (let seed = 1; seed <= 30; seed++) {
          const random = createRandom(seed);
          const session = simulate(random);
          let transcript = createTranscript([], counter);
          // A step prepares for its model, and for a second one when it may escalate.
          let models = [random.pick(budgets)];
          for (let step = 0; step < 250; step++) {
            for (const event of session.advance(transcript)) transcript.add(event);
            if (random.chance(0.03)) transcript = createTranscript(session.events, counter);
            if (random.chance(0.3)) models = random.chance(0.7) ? [random.pick(budgets)] : [random.pick(budgets), random.pick(budgets)];
            const turnId = random.chance(0.9) ? session.running() : undefined;
            const view = transcript.conversation(turnId);
            const fresh = createTranscript(session.events, exact).conversation(turnId);
            for (const budget of models) {
              const context = `seed ${seed}, step ${step}, turn ${turnId}, budget ${budget}`;
              const built = build(view, budget);
              const reference = referenceContext(fresh, budget, exact);
              expectSameDecisions(built, reference, context);
              // Counted exactly, even the history's tokens are the old ones.
              if (!counter.boundMessage) expect(built, context).toEqual(reference);
            }
          }
        }
      });
    }
  }

  for (const [kind, simulate] of Object.entries(sessions)) {
    it(`with counts taken later, never passes the budget and prepares as exact counts do once they ran: ${kind}`, () => {
      const exact = createCharCounter();
      let short = 0;
      for (let seed = 1; seed <= 20; seed++) {
        const random = createRandom(1_000 + seed);
        const session = simulate(random);
        // The runtime's counter queues counts with `later`; here they wait until the test runs them.
        const queue: Array<() => void> = [];
        const run = () => {
          while (queue.length > 0) queue.shift()!();
        };
        const counter: TokenCounter = { ...createBoundedCharCounter(), minMessageTokens: 1, later: (work) => queue.push(work) };
        let transcript = createTranscript([], counter);
        let models = [random.pick(budgets)];
        for (let step = 0; step < 200; step++) {
          // Most steps, what the last one queued ran while its model answered.
          if (random.chance(0.8)) run();
          for (const event of session.advance(transcript)) transcript.add(event);
          if (random.chance(0.03)) transcript = createTranscript(session.events, counter);
          if (random.chance(0.3)) models = random.chance(0.7) ? [random.pick(budgets)] : [random.pick(budgets), random.pick(budgets)];
          const turnId = random.chance(0.9) ? session.running() : undefined;
          const fresh = createTranscript(session.events, exact).conversation(turnId);
          for (const budget of models) {
            const uncountedRatio = random.pick([0.01, 0.1, 0.3]);
            const build = () =>
              buildContext({ model: 'scripted:default', history: transcript.conversation(turnId), tools: [], toolTokens: 0, tokens: counter, options: { ...options(budget), uncountedRatio } });
            const context = `seed ${seed}, step ${step}, turn ${turnId}, budget ${budget}, ratio ${uncountedRatio}`;
            const built = build();
            const reference = referenceContext(fresh, budget, exact);
            // Exact: the budget, whether to compact, the model choice.
            expect(built.budget, context).toBe(reference.budget);
            expect(built.needsCompaction, context).toBe(reference.needsCompaction);
            expect(built.historyTokens > built.budget, context).toBe(reference.historyTokens > reference.budget);
            // The window: never over budget (but for the newest message alone) and never longer than the exact one.
            const sent = built.request.messages.slice(1);
            if (sent.length > 1) expect(sent.reduce((sum, message) => sum + exact.countMessage(message), 0), context).toBeLessThanOrEqual(built.budget);
            expect(sent.length, context).toBeLessThanOrEqual(reference.request.messages.length - 1);
            if (sent.length < reference.request.messages.length - 1) short += 1;
            // Once what was queued ran, the same step prepares as exact counts do.
            let rebuilt = built;
            while (queue.length > 0) {
              run();
              rebuilt = build();
            }
            expectSameDecisions(rebuilt, reference, `${context}, counted`);
          }
        }
      }
      expect(short).toBeGreaterThan(20);
    });
  }

  it('gives the context exact counts give with the tiktoken counter, over text of every script', () => {
    // Without `later`, every decision is taken on counts (with it, see context-incremental.test.ts).
    const tokens = createTokenCounter({ later: null });
    // Exact counts for the reference, kept by message so that a history is not counted again at every step.
    const counts = new Map<string, number>();
    const exact = exactOnly({
      count: (text) => tokens.count(text),
      countMessage: (message) => {
        const key = JSON.stringify(message);
        let count = counts.get(key);
        if (count === undefined) counts.set(key, (count = tokens.countMessage(message)));
        return count;
      },
    });
    for (let seed = 1; seed <= 6; seed++) {
      const random = createRandom(seed);
      const session = simulateRuntimeSession(random, { queuePrompts: true, text: randomText });
      const transcript = createTranscript([], tokens);
      for (let step = 0; step < 120; step++) {
        for (const event of session.advance(transcript)) transcript.add(event);
        const turnId = session.running();
        const fresh = createTranscript(session.events, exact).conversation(turnId);
        // Budgets around the history's size, so that bounds settle some steps and counts others.
        const total = fresh.totalTokens();
        const budget = random.pick([total, Math.floor(total / 2), Math.floor(total * 1.3), Math.floor(total * 4), 50]);
        const built = buildContext({ model: 'scripted:default', history: transcript.conversation(turnId), tools: [], toolTokens: 0, tokens, options: options(budget) });
        expectSameDecisions(built, referenceContext(fresh, budget, tokens), `seed ${seed}, step ${step}, budget ${budget}`);
      }
    }
  });
});

/**
 * `actual` decides as `expected` (built on exact counts) does: the same window, compaction and cut, the same
 * budget, and the same model choice; its `historyTokens` may be a bound, but is over the budget exactly when
 * the exact total is.
 */
function expectSameDecisions(actual: PreparedContext, expected: PreparedContext, context: string) {
  const { historyTokens, ...decisions } = actual;
  const { historyTokens: exactTokens, ...exactDecisions } = expected;
  expect(decisions, context).toEqual(exactDecisions);
  expect(historyTokens, context).toBeGreaterThanOrEqual(exactTokens);
  expect(historyTokens > actual.budget, context).toBe(exactTokens > expected.budget);
  const choose = (prepared: PreparedContext) =>
    decideModel({ smallModel: 'ollama:small', largeModel: 'openai:large', complex: false, validationFailures: 0, contextTokens: prepared.historyTokens, smallContextBudget: prepared.budget });
  expect(choose(actual), context).toEqual(choose(expected));
}

/** `buildContext` as it was before fits were kept: a walk back over the view and a set of the calls asked. */
function referenceContext(history: ConversationView, window: number, tokens: TokenCounter): PreparedContext {
  const { systemPrompt, contextWindow, maxOutputTokens, safetyRatio } = options(window);
  const system = history.summary ? `${systemPrompt}\n\nSummary of the earlier conversation:\n${history.summary}` : systemPrompt;
  const systemMessage: ChatMessage = { role: 'system', content: system };
  const reserved = maxOutputTokens + Math.ceil(contextWindow * safetyRatio) + tokens.countMessage(systemMessage);
  const budget = Math.max(0, contextWindow - reserved);
  const length = history.length;
  let used = 0;
  let start = length;
  while (start > 0) {
    const size = history.tokens(start - 1);
    if (used + size > budget) break;
    used += size;
    start -= 1;
  }
  const total = start === 0 ? used : history.totalTokens();
  if (start === length && length > 0) start = length - 1;
  const kept: ChatMessage[] = [systemMessage];
  const askedIds = new Set<string>();
  for (let index = start; index < length; index++) {
    const message = history.message(index);
    if (message.role === 'assistant') for (const call of message.toolCalls ?? []) askedIds.add(call.id);
    if (message.role === 'tool' && !askedIds.has(message.toolCallId)) continue;
    kept.push(message);
  }
  let compactThroughSeq = 0;
  if (total > budget * 0.8 && total > budget / 2 && length > 2) {
    let rest = 0;
    let keep = length;
    while (keep > 1) {
      const size = history.tokens(keep - 1);
      if (rest + size > budget / 2) break;
      rest += size;
      keep -= 1;
    }
    const cut = Math.min(keep - 1, length - 2);
    if (cut >= 0) compactThroughSeq = history.seq(cut);
  }
  return {
    request: { model: 'scripted:default', messages: kept, tools: [] },
    needsCompaction: compactThroughSeq > 0,
    compactThroughSeq,
    historyTokens: total,
    budget,
  };
}
