import { describe, expect, it } from 'vitest';
import { createTranscript } from '../../services/runtime/sessions/transcript.ts';
import type { ConversationView } from '../../services/runtime/context/conversation.ts';
import { createCharCounter, createLogBuilder } from '../helpers/log-events.ts';
import { createBoundedCharCounter } from '../helpers/token-counters.ts';
import { createRandom, simulateArbitrarySession, simulateRuntimeSession } from '../helpers/random-log.ts';
import type { Random } from '../helpers/random-log.ts';
import type { TokenCounter } from '../../src/tokens.ts';
import type { LogEvent } from '../../src/protocol/index.ts';

const contents = (view: ConversationView) => Array.from({ length: view.length }, (_, index) => view.message(index).content);

describe('transcript conversation', () => {
  it('lists prompts, answers and tool results in log order, without tool.use, turn.ended or session events', () => {
    const log = createLogBuilder();
    const transcript = createTranscript([
      log.created(),
      log.prompt('t1', 'q1'),
      log.answer('t1', 'a1', [{ id: 'c1' }]),
      log.toolUse('t1', 'c1'),
      log.result('t1', 'c1', 'r1'),
      log.answer('t1', 'done1'),
      log.ended('t1'),
    ]);
    const view = transcript.conversation('t1');
    expect(contents(view)).toEqual(['q1', 'a1', 'r1', 'done1']);
    expect(Array.from({ length: view.length }, (_, index) => view.seq(index))).toEqual([2, 3, 5, 6]);
  });

  it('orders by turn: a prompt queued during another turn goes after that turn', () => {
    const log = createLogBuilder();
    const transcript = createTranscript([log.prompt('t1', 'q1'), log.answer('t1', 'a1', [{ id: 'c1' }]), log.prompt('t2', 'q2')]);
    // t1 goes on after t2's prompt was logged; built once, then kept up to date by add.
    expect(contents(transcript.conversation())).toEqual(['q1', 'a1', 'q2']);
    transcript.add(log.result('t1', 'c1', 'r1'));
    transcript.add(log.answer('t1', 'done1'));
    expect(contents(transcript.conversation())).toEqual(['q1', 'a1', 'r1', 'done1', 'q2']);
    transcript.add(log.answer('t2', 'a2'));
    expect(contents(transcript.conversation('t2'))).toEqual(['q1', 'a1', 'r1', 'done1', 'q2', 'a2']);
  });

  it('stops at the current turn', () => {
    const log = createLogBuilder();
    const transcript = createTranscript([log.prompt('t1', 'q1'), log.prompt('t2', 'q2'), log.prompt('t3', 'q3'), log.answer('t1', 'a1')]);
    expect(contents(transcript.conversation('t1'))).toEqual(['q1', 'a1']);
    expect(contents(transcript.conversation('t2'))).toEqual(['q1', 'a1', 'q2']);
    expect(() => transcript.conversation('t1').message(2)).toThrow(RangeError);
  });

  it('puts steer messages in their turn and drops events of a turn whose prompt it never saw', () => {
    const log = createLogBuilder();
    const transcript = createTranscript([log.answer('t0', 'orphan'), log.prompt('t1', 'q1'), log.steer('t1', 'faster'), log.answer('t1', 'a1')]);
    expect(contents(transcript.conversation('t1'))).toEqual(['q1', 'faster', 'a1']);
  });

  it('starts after the newest summary, cut by log sequence, keeping the rest of a turn the summary split', () => {
    const log = createLogBuilder();
    const events = [log.prompt('t1', 'q1'), log.answer('t1', 'a1', [{ id: 'c1' }]), log.result('t1', 'c1', 'r1'), log.answer('t1', 'done1'), log.prompt('t2', 'q2')];
    const transcript = createTranscript(events);
    expect(transcript.conversation('t2').summary).toBeUndefined();
    transcript.add(log.summary('t2', 'earlier: q1 asked', 3));
    const view = transcript.conversation('t2');
    expect(view.summary).toBe('earlier: q1 asked');
    expect(contents(view)).toEqual(['done1', 'q2']);
    transcript.add(log.answer('t2', 'a2'));
    expect(contents(transcript.conversation('t2'))).toEqual(['done1', 'q2', 'a2']);
  });

  it('bounds each message as it is placed and counts it once, only when asked', () => {
    const log = createLogBuilder();
    const counter = createBoundedCharCounter();
    // Counts (length + 1): 'abc' 4, 'de' 3, 'f' 2, 'ghij' 5. Bounds (2 × length + 1 + length % 3): 7, 7, 4, 10.
    const transcript = createTranscript([log.prompt('t1', 'abc'), log.answer('t1', 'de'), log.prompt('t2', 'f')], counter);
    const first = transcript.conversation('t1');
    expect(first.totalBound()).toBe(7 + 7);
    expect(counter.calls()).toBe(0);
    expect(first.tokens(1)).toBe(3);
    expect(counter.calls()).toBe(1);
    expect(first.totalBound()).toBe(7 + 3);
    expect(first.totalTokens()).toBe(4 + 3);
    // t2's prompt is queued after the view: neither in its total nor counted.
    expect(counter.calls()).toBe(2);
    expect(transcript.conversation().totalBound()).toBe(4 + 3 + 4);
    expect(transcript.conversation().totalTokens()).toBe(4 + 3 + 2);
    transcript.add(log.answer('t2', 'ghij'));
    expect(transcript.conversation('t2').totalBound()).toBe(4 + 3 + 2 + 10);
    expect(transcript.conversation('t2').totalTokens()).toBe(4 + 3 + 2 + 5);
    expect(counter.calls()).toBe(4);
    expect(counter.bounds()).toBe(4);
  });

  it('says whether the total passes a limit, counting newest first only until the bounds settle it', () => {
    const log = createLogBuilder();
    const counter = createBoundedCharCounter();
    // Counts 4, 3, 2 (9); bounds 7, 7, 4 (18).
    const view = createTranscript([log.prompt('t1', 'abc'), log.answer('t1', 'de'), log.prompt('t2', 'f')], counter).conversation();
    expect(view.totalExceeds(18)).toBe(false);
    expect(view.totalExceeds(100)).toBe(false);
    expect(counter.calls()).toBe(0);
    // 18 > 15: 'f' counted (16), then 'de' (12).
    expect(view.totalExceeds(15)).toBe(false);
    expect(counter.calls()).toBe(2);
    expect(view.totalExceeds(8)).toBe(true);
    expect(view.totalExceeds(9)).toBe(false);
    expect(counter.calls()).toBe(3);
  });

  it('counts nothing for a transcript with no counter, and says so when asked for tokens', () => {
    const log = createLogBuilder();
    const view = createTranscript([log.prompt('t1', 'abc')]).conversation();
    expect(view.message(0).content).toBe('abc');
    expect(() => view.fit(10)).toThrow(/without a token counter/);
    expect(() => view.totalBound()).toThrow(/without a token counter/);
  });
});

describe('a summary while a prompt is queued', () => {
  it('replaces only the running turn’s messages it covers: a prompt queued before the cut stays', () => {
    const log = createLogBuilder();
    const events = [
      log.prompt('t1', 'q1'),
      log.answer('t1', 'a1', [{ id: 'c1' }]),
      log.prompt('t2', 'q2'),
      log.result('t1', 'c1', 'r1'),
      log.answer('t1', 'a2', [{ id: 'c2' }]),
      log.result('t1', 'c2', 'r2'),
    ];
    const transcript = createTranscript(events);
    expect(contents(transcript.conversation('t1'))).toEqual(['q1', 'a1', 'r1', 'a2', 'r2']);
    // Preparing t1 cuts at a2 (seq 5): the summary covers q1, a1, r1, a2, and t2's prompt (seq 3) is not among them.
    transcript.add(log.summary('t1', 'q1 a1 r1 a2', 5));
    expect(contents(transcript.conversation('t1'))).toEqual(['r2']);
    expect(contents(transcript.conversation())).toEqual(['r2', 'q2']);
    // Another node reading the log agrees.
    expect(contents(createTranscript(transcript.events).conversation())).toEqual(['r2', 'q2']);
  });

  it('keeps turn order: a prompt queued after the cut still comes after the rest of the running turn', () => {
    const log = createLogBuilder();
    const transcript = createTranscript([
      log.prompt('t1', 'q1'),
      log.answer('t1', 'a1', [{ id: 'c1' }]),
      log.result('t1', 'c1', 'r1'),
      log.prompt('t2', 'q2'),
      log.answer('t1', 'a2', [{ id: 'c2' }]),
    ]);
    transcript.conversation();
    transcript.add(log.summary('t1', 'q1 a1 r1', 3));
    transcript.add(log.result('t1', 'c2', 'r2'));
    expect(contents(transcript.conversation('t1'))).toEqual(['a2', 'r2']);
    transcript.add(log.answer('t1', 'done'));
    transcript.add(log.ended('t1'));
    transcript.add(log.answer('t2', 'a3'));
    expect(contents(transcript.conversation())).toEqual(['a2', 'r2', 'done', 'q2', 'a3']);
    expect(transcript.conversation().resultsFollowCalls).toBe(true);
    expect(contents(createTranscript(transcript.events).conversation())).toEqual(['a2', 'r2', 'done', 'q2', 'a3']);
  });

  it('cuts the queued turn’s own view where Preparing cut it, though its prompt was logged before the rest of the turn it waited for', () => {
    const log = createLogBuilder();
    const transcript = createTranscript([
      log.prompt('t1', 'q1'),
      log.answer('t1', 'a1', [{ id: 'c1' }]),
      log.prompt('t2', 'q2'),
      log.result('t1', 'c1', 'r1'),
      log.answer('t1', 'done'),
      log.ended('t1'),
    ]);
    const view = transcript.conversation('t2');
    expect(contents(view)).toEqual(['q1', 'a1', 'r1', 'done', 'q2']);
    // Preparing t2 keeps its prompt and cuts just before it, at 'done' (seq 5); q2 (seq 3) is after the cut.
    transcript.add(log.summary('t2', 'q1 a1 r1 done', view.seq(3)));
    expect(contents(transcript.conversation('t2'))).toEqual(['q2']);
    expect(contents(createTranscript(transcript.events).conversation('t2'))).toEqual(['q2']);
  });
});

describe('transcript turns', () => {
  it('finds a turn’s events and open calls by walking back to its prompt', () => {
    const log = createLogBuilder();
    const transcript = createTranscript([
      log.prompt('t1', 'q1'),
      log.ended('t1'),
      log.prompt('t2', 'q2'),
      log.answer('t2', 'a2', [{ id: 'c1' }, { id: 'c2' }]),
      log.result('t2', 'c1', 'r1'),
    ]);
    expect(transcript.turnEvents('t2').map((event) => event.type)).toEqual(['user.message', 'assistant.message', 'tool.result']);
    expect(transcript.openCalls('t2').map((call) => call.id)).toEqual(['c2']);
    expect(transcript.unfinishedTurns().map((turn) => turn.turnId)).toEqual(['t2']);
  });

  it('tells of an unfinished turn how its open calls went out: the arguments its tool.use logged, unless a hook blocked it', () => {
    const log = createLogBuilder();
    const transcript = createTranscript([
      log.prompt('t1', 'q1'),
      log.answer('t1', 'a1', [{ id: 'c1' }, { id: 'c2' }, { id: 'c3' }, { id: 'c4' }, { id: 'c5' }]),
      log.toolUse('t1', 'c1', { argsFinal: true }),
      log.result('t1', 'c1', 'r1'),
      log.toolUse('t1', 'c2', { args: { path: 'sandbox/a' }, argsRewrittenBy: ['paths'], argsFinal: true }),
      log.toolUse('t1', 'c3', { blockedBy: 'policy', argsFinal: true }),
      // As an older runtime logged it: it may have gone out, or a hook may have blocked it unmarked.
      log.toolUse('t1', 'c5', { args: { path: 'b' } }),
    ]);
    const [turn] = transcript.unfinishedTurns();
    expect(turn!.openCalls.map((call) => call.id)).toEqual(['c2', 'c3', 'c4', 'c5']);
    expect(turn!.sent).toEqual({
      c2: { args: { path: 'sandbox/a' }, argsRewrittenBy: ['paths'], final: true, effectId: 's:t1:c2' },
      c5: { args: { path: 'b' }, final: false, effectId: 's:t1:c5' },
    });
  });

  it('counts only the newest step’s results, sends and approvals when a model reuses a call id in every step', () => {
    const log = createLogBuilder();
    const atStep = (event: LogEvent, step: number): LogEvent => ({ ...event, step });
    const approval = (type: 'approval.requested' | 'approval.decided', step: number): LogEvent =>
      atStep(
        {
          ...log.result('t1', 'call_0', ''),
          type,
          data: type === 'approval.requested' ? { toolCallId: 'call_0', name: 'lookup', args: {} } : { toolCallId: 'call_0', approved: true },
        } as LogEvent,
        step,
      );
    const transcript = createTranscript([
      log.prompt('t1', 'q1'),
      atStep(log.answer('t1', '', [{ id: 'call_0' }]), 1),
      approval('approval.requested', 1),
      approval('approval.decided', 1),
      atStep(log.toolUse('t1', 'call_0', { argsFinal: true }), 1),
      atStep(log.result('t1', 'call_0', 'r1'), 1),
      atStep(log.answer('t1', '', [{ id: 'call_0' }]), 2),
      approval('approval.requested', 2),
    ]);
    const [turn] = transcript.unfinishedTurns();
    expect(turn).toMatchObject({ lastStep: 2, openCalls: [{ id: 'call_0' }], sent: {}, decisions: {} });
    expect(transcript.openCalls('t1').map((call) => call.id)).toEqual(['call_0']);
  });

  it('keeps the effectId an open call’s tool.use went out under, though an older runtime built it without the step', () => {
    const log = createLogBuilder();
    const transcript = createTranscript([log.prompt('t1', 'q1'), log.answer('t1', '', [{ id: 'c1' }]), log.toolUse('t1', 'c1', { argsFinal: true })]);
    expect(transcript.unfinishedTurns()[0]!.sent['c1']).toMatchObject({ effectId: 's:t1:c1' });
  });

  it('keeps its content when trimmed', () => {
    const log = createLogBuilder();
    const transcript = createTranscript([log.prompt('t1', 'q1'), log.answer('t1', 'a1')]);
    transcript.conversation();
    transcript.trim();
    transcript.add(log.prompt('t2', 'q2'));
    expect(contents(transcript.conversation())).toEqual(['q1', 'a1', 'q2']);
    expect(transcript.events).toHaveLength(3);
    expect(transcript.lastSeq).toBe(3);
  });

  it('drops the turn.started of ended turns when trimmed, and keeps that of a turn still to run', () => {
    const log = createLogBuilder();
    const transcript = createTranscript([log.prompt('t1', 'q1'), log.started('t1'), log.answer('t1', 'a1'), log.ended('t1'), log.prompt('t2', 'q2')]);
    transcript.add(log.started('t2'));
    transcript.trim();
    expect(transcript.events.map((event) => `${event.turnId}:${event.type}`)).toEqual(['t1:user.message', 't1:assistant.message', 't1:turn.ended', 't2:user.message', 't2:turn.started']);
    expect(transcript.unfinishedTurns()[0]).toMatchObject({ turnId: 't2', deadline: 1_700_000_900_000 });
    transcript.add(log.ended('t2'));
    transcript.trim();
    expect(transcript.events.filter((event) => event.type === 'turn.started')).toEqual([]);
    expect(transcript.lastSeq).toBe(7);
  });
});

/** The fit walked back from the newest message, as Preparing did before fits were kept. */
function walkBack(view: ConversationView, budget: number) {
  let start = view.length;
  let used = 0;
  while (start > 0) {
    const size = view.tokens(start - 1);
    if (used + size > budget) break;
    used += size;
    start -= 1;
  }
  return { start, used };
}

/** Whether every tool result follows its call's assistant message past results only, or opens the conversation. */
function resultsFollowCalls(view: ConversationView): boolean {
  for (let index = 0; index < view.length; index++) {
    const message = view.message(index);
    if (message.role !== 'tool') continue;
    let at = index - 1;
    while (at >= 0 && view.message(at).role === 'tool') at -= 1;
    if (at < 0) continue;
    const asker = view.message(at);
    if (asker.role !== 'assistant' || !asker.toolCalls?.some((call) => call.id === message.toolCallId)) return false;
  }
  return true;
}

describe('conversation fit', () => {
  it('is the longest run of newest messages within the budget, and moves on as the conversation grows', () => {
    const log = createLogBuilder();
    // Tokens: 'aaaa' 5, 'bb' 3, 'c' 2, then 'dddddd' 7.
    const transcript = createTranscript([log.prompt('t1', 'aaaa'), log.answer('t1', 'bb'), log.prompt('t2', 'c')], createCharCounter());
    expect(transcript.conversation('t2').fit(6)).toEqual({ start: 1, used: 5 });
    expect(transcript.conversation('t2').fit(10)).toEqual({ start: 0, used: 10 });
    expect(transcript.conversation('t2').fit(1)).toEqual({ start: 3, used: 0 });
    transcript.add(log.answer('t2', 'dddddd'));
    expect(transcript.conversation('t2').fit(6)).toEqual({ start: 4, used: 0 });
    expect(transcript.conversation('t2').fit(10)).toEqual({ start: 2, used: 9 });
  });

  it('counts only the messages added since the last fit of the same budget', () => {
    const log = createLogBuilder();
    const counter = createCharCounter();
    const transcript = createTranscript([], counter);
    for (let turn = 0; turn < 200; turn++) transcript.add(log.prompt(`t${turn}`, 'qqqq'));
    expect(transcript.conversation().fit(20)).toEqual({ start: 196, used: 20 });
    const counted = counter.calls();
    transcript.add(log.answer('t199', 'aaaa'));
    expect(transcript.conversation().fit(20)).toEqual({ start: 197, used: 20 });
    expect(counter.calls()).toBe(counted + 1);
  });

  it('fits by bounds where they fit, and counts only at the edge of the budget', () => {
    const log = createLogBuilder();
    const counter = createBoundedCharCounter();
    const transcript = createTranscript([], counter);
    // Each prompt 'qqqq' counts 5 and is bounded by 10.
    for (let turn = 0; turn < 200; turn++) transcript.add(log.prompt(`t${turn}`, 'qqqq'));
    expect(transcript.conversation().fit(2_000)).toEqual({ start: 0, used: 2_000 });
    expect(counter.calls()).toBe(0);
    // Two fit by bounds; the third does not, so it is counted, then the window as far as needed: the newest
    // one (bound 10, count 5) is enough. The fourth again, with one more of the window. The fifth does not fit.
    expect(transcript.conversation().fit(20)).toEqual({ start: 196, used: 20 });
    expect(counter.calls()).toBe(5);
    // A new message fits by its bound once the oldest goes: counted, since the window is at the budget.
    transcript.add(log.answer('t199', 'aaaa'));
    expect(transcript.conversation().fit(20)).toEqual({ start: 197, used: 20 });
    expect(counter.calls()).toBe(6);
    // Half the budget walks back again, over counts taken already.
    expect(transcript.conversation().fit(10)).toEqual({ start: 199, used: 10 });
    expect(counter.calls()).toBe(6);
  });

  it('is not moved on past a message inserted before its end', () => {
    const log = createLogBuilder();
    const transcript = createTranscript([log.prompt('t1', 'q1'), log.answer('t1', 'a1', [{ id: 'c1' }]), log.prompt('t2', 'q2')], createCharCounter());
    // A fit of t2's view covers q2; t1's result goes in before it.
    expect(transcript.conversation('t2').fit(100)).toEqual({ start: 0, used: 3 + 3 + 3 });
    expect(transcript.conversation('t1').fit(100)).toEqual({ start: 0, used: 3 + 3 });
    transcript.add(log.result('t1', 'c1', 'long result'));
    expect(transcript.conversation('t1').fit(100)).toEqual({ start: 0, used: 3 + 3 + 12 });
    expect(transcript.conversation('t2').fit(100)).toEqual({ start: 0, used: 3 + 3 + 12 + 3 });
  });

  it('starts again after a summary', () => {
    const log = createLogBuilder();
    const transcript = createTranscript([log.prompt('t1', 'q1'), log.answer('t1', 'a1'), log.prompt('t2', 'q2')], createCharCounter());
    expect(transcript.conversation('t2').fit(100)).toEqual({ start: 0, used: 9 });
    transcript.add(log.summary('t2', 'q1 asked', 1));
    transcript.add(log.answer('t2', 'a2'));
    expect(transcript.conversation('t2').fit(100)).toEqual({ start: 0, used: 9 });
  });

  it('gives the messages from a start, after a head when given', () => {
    const log = createLogBuilder();
    const view = createTranscript([log.prompt('t1', 'q1'), log.answer('t1', 'a1'), log.prompt('t2', 'q2')]).conversation('t1');
    const head = { role: 'system', content: 'sys' } as const;
    expect(view.messages(0).map((message) => message.content)).toEqual(['q1', 'a1']);
    expect(view.messages(1, head).map((message) => message.content)).toEqual(['sys', 'a1']);
    expect(view.messages(0, head).map((message) => message.content)).toEqual(['sys', 'q1', 'a1']);
    expect(view.messages(2, head)).toEqual([head]);
    expect(() => view.messages(3)).toThrow(RangeError);
  });

  it('says results follow their calls until one is logged elsewhere', () => {
    const log = createLogBuilder();
    const transcript = createTranscript([log.prompt('t1', 'q1'), log.answer('t1', 'a1', [{ id: 'c1' }, { id: 'c2' }]), log.result('t1', 'c2', 'r2')]);
    transcript.add(log.result('t1', 'c1', 'r1'));
    expect(transcript.conversation().resultsFollowCalls).toBe(true);
    // A summary that took the call leaves its results leading the conversation: still whole runs.
    transcript.add(log.summary('t1', 'asked', 2));
    expect(transcript.conversation().resultsFollowCalls).toBe(true);
    transcript.add(log.steer('t1', 'and?'));
    transcript.add(log.result('t1', 'c2', 'late'));
    expect(transcript.conversation().resultsFollowCalls).toBe(false);
  });

  it('keeps results after their calls when a later turn’s summary cuts a turn that ran while another waited', () => {
    const log = createLogBuilder();
    const transcript = createTranscript([
      log.prompt('t1', 'q1'),
      log.answer('t1', 'a1', [{ id: 'c1' }, { id: 'c2' }]),
      log.result('t1', 'c1', 'r1'),
      log.prompt('t2', 'q2'),
      log.result('t1', 'c2', 'r2'),
      log.answer('t1', 'done'),
      log.ended('t1'),
      log.answer('t2', 'a2'),
    ]);
    expect(transcript.conversation().resultsFollowCalls).toBe(true);
    transcript.add(log.summary('t2', 'q1, a1, r1', 3));
    // The rest of t1 still comes before t2, whose prompt was logged earlier than that rest: r2 opens the conversation.
    const view = transcript.conversation();
    expect(contents(view)).toEqual(['r2', 'done', 'q2', 'a2']);
    expect(view.resultsFollowCalls).toBe(true);
  });

  const budgets = [0, 1, 4, 12, 30, 75, 200, 10_000];
  const sessions = {
    'a session as the runtime logs it, one prompt at a time': (random: Random) => simulateRuntimeSession(random, { queuePrompts: false }),
    'a session as the runtime logs it, prompts queued while a turn runs': (random: Random) => simulateRuntimeSession(random, { queuePrompts: true }),
    'a log written some other way': simulateArbitrarySession,
  };
  const counters: Record<string, () => TokenCounter & { calls(): number; bounds?(): number }> = {
    'counted exactly': createCharCounter,
    'bounded, counted where it matters': createBoundedCharCounter,
  };
  for (const [kind, simulate] of Object.entries(sessions)) {
    for (const [counting, createCounter] of Object.entries(counters)) {
      it(`matches a walk back from scratch over random histories, budgets and growth: ${kind}, ${counting}`, () => {
        const counter = createCounter();
        let whole = 0;
        let checks = 0;
        for (let seed = 1; seed <= 30; seed++) {
          const random = createRandom(seed);
          const session = simulate(random);
          let transcript = createTranscript([], counter);
          let budget = budgets[0]!;
          for (let step = 0; step < 250; step++) {
            for (const event of session.advance(transcript)) {
              if (event.type !== 'summary.created') {
                transcript.add(event);
                continue;
              }
              // A summary takes out the oldest messages of its turn's view, up to its cut, and nothing else.
              const before = contents(transcript.conversation());
              const cut = transcript.conversation(event.turnId).summaryCut(event.data.throughSeq);
              // The runtime cuts at a message of the running turn's view: the cut ends right after it.
              if (kind.includes('as the runtime logs it')) expect(transcript.conversation(event.turnId).seq(cut - 1)).toBe(event.data.throughSeq);
              transcript.add(event);
              expect(contents(transcript.conversation()), `seed ${seed}, step ${step}, cut ${cut}`).toEqual(before.slice(cut));
            }
            // Now and then another node takes the session over from its log.
            if (random.chance(0.03)) transcript = createTranscript(session.events, counter);
            if (random.chance(0.4)) budget = random.pick(budgets);
            const turns = session.turns();
            const turnId = random.chance(0.8) ? session.running() : random.chance(0.5) || turns.length === 0 ? undefined : random.pick(turns);
            const view = transcript.conversation(turnId);
            const fresh = createTranscript(session.events, createCharCounter()).conversation(turnId);
            const context = `seed ${seed}, step ${step}, turn ${turnId}, budget ${budget}`;
            expect(contents(view), context).toEqual(contents(fresh));
            // The start is exact; the sum bounds the exact one from above and stays within the budget.
            const fit = view.fit(budget);
            const exact = walkBack(fresh, budget);
            expect(fit.start, context).toBe(exact.start);
            expect(fit.used, context).toBeGreaterThanOrEqual(exact.used);
            expect(fit.used, context).toBeLessThanOrEqual(Math.max(budget, exact.used));
            if (!counter.boundMessage) expect(fit.used, context).toBe(exact.used);
            expect(view.messages(fit.start), context).toEqual(fresh.messages(fit.start));
            // Totals: the bound is never under, and a limit is passed exactly when the exact total passes it.
            const total = fresh.totalTokens();
            expect(view.totalBound(), context).toBeGreaterThanOrEqual(total);
            // Asked now and then, as Preparing asks (and as it would count every message, near the total).
            if (random.chance(0.3)) {
              const limit = random.pick([0, budget / 2, budget * 0.8, budget, total - 1, total, random.int(2 * total + 2)]);
              expect(view.totalExceeds(limit), `${context}, limit ${limit}`).toBe(total > limit);
            }
            checks += 1;
            if (view.resultsFollowCalls) {
              whole += 1;
              expect(resultsFollowCalls(view), context).toBe(true);
            }
          }
        }
        // Logged as the runtime logs, results follow their calls, queued prompts and summaries or not.
        if (kind.includes('as the runtime logs it')) expect(whole).toBe(checks);
        // A bounded counter counts some messages and not others.
        if (counter.bounds) expect(counter.calls()).toBeLessThan(counter.bounds());
      });
    }
  }
});
