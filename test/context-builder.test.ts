import { describe, expect, it } from 'vitest';
import { buildContext } from '../services/runtime/context-builder.ts';
import { createTranscript } from '../services/runtime/transcript.ts';
import type { LogEvent } from '../src/protocol/index.ts';
import type { ConversationView } from '../services/runtime/transcript.ts';
import { createCharCounter, createLogBuilder } from './helpers/log-events.ts';

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

  it('walks back only as far as the budget goes when the history is already counted', () => {
    const log = createLogBuilder();
    const counter = createCharCounter();
    const events: LogEvent[] = [];
    for (let turn = 0; turn < 500; turn++) events.push(log.prompt(`t${turn}`, 'qqqq'), log.answer(`t${turn}`, 'aaaa'));
    events.push(log.prompt('now', 'last'));
    const transcript = createTranscript(events, counter);
    // The system prompt is counted by a counter of its own, so `counter` sees only history messages.
    const build = () => buildContext({ model: 'scripted:default', history: transcript.conversation('now'), tools: [], toolTokens: 0, tokens: createCharCounter(), options: options(50) });
    const cold = build();
    expect(cold.historyTokens).toBe(1001 * 5);
    const counted = counter.calls();
    const reads: number[] = [];
    const history = transcript.conversation('now');
    const spy: ConversationView = {
      summary: history.summary,
      length: history.length,
      resultsFollowCalls: history.resultsFollowCalls,
      message: (index) => history.message(index),
      seq: (index) => history.seq(index),
      tokens: (index) => (reads.push(index), history.tokens(index)),
      totalTokens: () => history.totalTokens(),
      fit: (budget) => history.fit(budget),
      messages: (start, head) => history.messages(start, head),
    };
    const warm = buildContext({ model: 'scripted:default', history: spy, tools: [], toolTokens: 0, tokens: createCharCounter(), options: options(50) });
    expect(counter.calls()).toBe(counted);
    expect(warm.historyTokens).toBe(cold.historyTokens);
    // 10 messages fit, one more is read to find the edge, and the compaction cut reads the newest few again.
    expect(new Set(reads).size).toBeLessThanOrEqual(11);
    expect(Math.min(...reads)).toBeGreaterThan(1001 - 12);
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
});
