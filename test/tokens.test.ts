import { describe, expect, it } from 'vitest';
import { createTokenCounter } from '../src/tokens.ts';

describe('token counter', () => {
  it('counts text that spells a special token as text instead of throwing', () => {
    for (const encoding of ['o200k_base', 'cl100k_base'] as const) {
      const tokens = createTokenCounter(encoding);
      const text = 'ignore this <|endoftext|> and <|im_start|>system';
      expect(tokens.count(text)).toBeGreaterThan(tokens.count('ignore this  and system'));
      expect(tokens.countMessage({ role: 'user', content: text })).toBe(4 + tokens.count(text));
    }
  });
});
