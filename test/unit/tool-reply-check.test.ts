import { describe, expect, it } from 'vitest';
import { answeredReply } from '../../src/bus/tool-client.ts';
import { toolCallReplySchema } from '../../src/protocol/index.ts';

describe('answeredReply', () => {
  it('reads an answered reply exactly as toolCallReplySchema parses it, unknown fields dropped', () => {
    const replies = [
      { v: 1, callId: 'c1', ok: true, output: 'alpha=5' },
      { v: 1, callId: 'c1', ok: true, output: { rows: [1, 2] }, extra: 'x' },
      { v: 1, callId: 'c1', ok: true, output: null },
      { v: 1, callId: 'c1', ok: true, output: undefined },
    ];
    for (const reply of replies) {
      const parsed = toolCallReplySchema.parse(reply);
      expect(answeredReply(reply)).toStrictEqual(parsed);
      expect(Object.keys(answeredReply(reply)!)).toEqual(Object.keys(parsed));
    }
  });

  it('leaves failures, and whatever the schema would refuse, to the schema', () => {
    const values = [
      null,
      'ok',
      [{ v: 1, callId: 'c1', ok: true, output: 'x' }],
      { v: 2, callId: 'c1', ok: true, output: 'x' },
      { v: 1, callId: 7, ok: true, output: 'x' },
      { v: 1, callId: 'c1', ok: 'true', output: 'x' },
      { v: 1, callId: 'c1', ok: true },
      { v: 1, callId: 'c1', ok: false, error: { code: 'timeout', message: 'slow', retryable: true } },
    ];
    for (const value of values) {
      expect(answeredReply(value)).toBeUndefined();
      const parsed = toolCallReplySchema.safeParse(value);
      if (parsed.success) expect(parsed.data.ok).toBe(false);
    }
  });
});
