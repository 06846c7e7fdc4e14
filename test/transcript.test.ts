import { describe, expect, it } from 'vitest';
import { createTranscript } from '../services/runtime/transcript.ts';
import type { ConversationView } from '../services/runtime/transcript.ts';
import { createCharCounter, createLogBuilder } from './helpers/log-events.ts';

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

  it('counts each message once and keeps a running total of the view', () => {
    const log = createLogBuilder();
    const counter = createCharCounter();
    const transcript = createTranscript([log.prompt('t1', 'abc'), log.answer('t1', 'de'), log.prompt('t2', 'f')], counter);
    const first = transcript.conversation('t1');
    expect(first.tokens(1)).toBe(3);
    expect(counter.calls()).toBe(1);
    expect(first.totalTokens()).toBe(4 + 3);
    expect(counter.calls()).toBe(3);
    expect(transcript.conversation().totalTokens()).toBe(4 + 3 + 2);
    transcript.add(log.answer('t2', 'ghij'));
    expect(transcript.conversation('t2').totalTokens()).toBe(4 + 3 + 2 + 5);
    expect(counter.calls()).toBe(4);
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
});
