import { describe, expect, it } from 'vitest';
import { RECALL_HEADING, recallSection } from '../../services/runtime/context/recall.ts';
import type { ChatMessage, MemoryHit } from '../../src/protocol/index.ts';
import { createCharCounter } from '../helpers/log-events.ts';

const hit = (text: string, type: MemoryHit['type'] = 'user.message'): MemoryHit => ({ sessionId: 's9', seq: 1, type, text, score: 1, ts: 0 });

// Pure, no bus: the section recalled snippets enter the context under, from the hits and the window.
describe('recallSection', () => {
  const window: ChatMessage[] = [{ role: 'system', content: 'sys' }, { role: 'user', content: 'my cat is called Tom, remember' }];

  it('lists the hits best first, each with its kind and session, under the heading', () => {
    const section = recallSection([hit('the sky was green'), hit('answered 42', 'assistant.message'), hit('lookup said 7', 'tool.result')], window, 1_000, createCharCounter());
    expect(section).toEqual({
      role: 'system',
      content: `${RECALL_HEADING}\n- (user, session s9) the sky was green\n- (assistant, session s9) answered 42\n- (tool result, session s9) lookup said 7`,
    });
  });

  it('leaves out what the window already holds, blank hits, and hits past the budget, keeping smaller ones after', () => {
    const counter = createCharCounter();
    const heading = RECALL_HEADING.length + 4;
    const short = '- (user, session s9) ok'.length + 1;
    const section = recallSection([hit('my cat is called Tom'), hit('  '), hit('x'.repeat(200)), hit('ok')], window, heading + short, counter);
    expect(section?.content).toBe(`${RECALL_HEADING}\n- (user, session s9) ok`);
  });

  it('gives no section when nothing is left', () => {
    expect(recallSection([hit('my cat is called Tom')], window, 1_000, createCharCounter())).toBeUndefined();
    expect(recallSection([hit('fits nowhere')], window, 3, createCharCounter())).toBeUndefined();
  });
});
