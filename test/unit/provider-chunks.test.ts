import { describe, expect, it } from 'vitest';
import { commonChunk } from '../../src/bus/provider-client.ts';
import { generateChunkSchema } from '../../src/protocol/index.ts';

const head = { v: 1, requestId: 'r1', seq: 2 };

describe('commonChunk', () => {
  it('reads the common chunks exactly as generateChunkSchema parses them, unknown fields dropped', () => {
    const chunks = [
      { ...head, type: 'text-delta', text: 'hi', extra: 1 },
      { ...head, type: 'tool-call', toolCallId: 'c1', name: 'read', args: { path: 'a' }, extra: true },
      { ...head, type: 'tool-call', toolCallId: 'c1', name: 'read', args: null },
      { ...head, type: 'usage', usage: { inputTokens: 3, outputTokens: 4, cachedTokens: 1 } },
      { ...head, type: 'done', finishReason: 'stop' },
      { ...head, type: 'done', finishReason: 'stop', model: 'scripted:default', cost: 0.25 },
      { ...head, type: 'done', finishReason: 'stop', model: undefined, cost: undefined },
    ];
    for (const chunk of chunks) {
      const parsed = generateChunkSchema.parse(chunk);
      expect(commonChunk(chunk)).toStrictEqual(parsed);
      expect(Object.keys(commonChunk(chunk)!)).toEqual(Object.keys(parsed));
    }
  });

  it('leaves to the schema every value it would refuse, and the other chunk types', () => {
    const values = [
      null,
      'text',
      [head],
      { ...head, v: 2, type: 'text-delta', text: 'x' },
      { ...head, seq: 1.5, type: 'text-delta', text: 'x' },
      { ...head, seq: 2 ** 60, type: 'done', finishReason: 'stop' },
      { ...head, requestId: 7, type: 'done', finishReason: 'stop' },
      { ...head, type: 'text-delta', text: 3 },
      { ...head, type: 'tool-call', toolCallId: 'c1', name: 'read' },
      { ...head, type: 'tool-call', toolCallId: 'c1', args: {} },
      { ...head, type: 'usage', usage: { inputTokens: 1, outputTokens: Number.POSITIVE_INFINITY } },
      { ...head, type: 'usage', usage: { inputTokens: Number.NaN, outputTokens: 1 } },
      { ...head, type: 'usage', usage: [1, 2] },
      { ...head, type: 'done', finishReason: 'stop', cost: Number.POSITIVE_INFINITY },
      { ...head, type: 'done', finishReason: 'stop', model: 5 },
      { ...head, type: 'done' },
      { ...head, type: 'error', error: { code: 'provider_error', message: 'x', retryable: false } },
      { ...head, type: 'retry', attempt: 2, maxAttempts: 3, delayMs: 100, error: { code: 'rate_limited', message: 'x', retryable: true } },
    ];
    for (const value of values) {
      const parsed = generateChunkSchema.safeParse(value);
      expect(commonChunk(value)).toBeUndefined();
      // None of the refused ones passes the schema either, except the types it does not read.
      if (parsed.success) expect(['error', 'retry']).toContain(parsed.data.type);
    }
  });
});
