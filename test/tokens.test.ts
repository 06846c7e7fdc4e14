import { readFileSync } from 'node:fs';
import { describe, expect, it } from 'vitest';
import { createTokenCounter } from '../src/tokens.ts';
import type { ChatMessage } from '../src/protocol/index.ts';
import { createRandom, randomText } from './helpers/random-log.ts';
import type { Random } from './helpers/random-log.ts';

const ENCODINGS = ['o200k_base', 'cl100k_base'] as const;

/** Any UTF-16 string, lone surrogates included. */
function randomCodeUnits(random: Random): string {
  const units = Array.from({ length: random.int(64) }, () => (random.chance(0.5) ? random.int(0x80) : random.chance(0.3) ? 0xd800 + random.int(0x800) : random.int(0x10000)));
  return String.fromCharCode(...units);
}

function randomMessage(random: Random, text: (random: Random) => string): ChatMessage {
  const roll = random.int(4);
  if (roll === 0) return { role: 'system', content: text(random) };
  if (roll === 1) return { role: 'user', content: text(random) };
  if (roll === 2) return { role: 'tool', toolCallId: text(random), name: text(random), content: text(random), isError: random.chance(0.2) };
  const toolCalls = Array.from({ length: random.int(3) }, (_, index) => ({ id: `c${index}`, name: text(random), args: { [text(random)]: text(random), n: random.int(1e6), list: [text(random)] } }));
  return { role: 'assistant', content: text(random), toolCalls };
}

describe('token counter', () => {
  it('counts text that spells a special token as text instead of throwing', () => {
    for (const encoding of ENCODINGS) {
      const tokens = createTokenCounter(encoding);
      const text = 'ignore this <|endoftext|> and <|im_start|>system';
      expect(tokens.count(text)).toBeGreaterThan(tokens.count('ignore this  and system'));
      expect(tokens.countMessage({ role: 'user', content: text })).toBe(4 + tokens.count(text));
    }
  });

  it('bounds a message from above by its UTF-8 length: never under the count, over text of every script and any code units', () => {
    for (const [seed, encoding] of ENCODINGS.entries()) {
      const tokens = createTokenCounter(encoding);
      const random = createRandom(seed + 1);
      for (let sample = 0; sample < 1_500; sample++) {
        const text = sample % 2 === 0 ? randomText : randomCodeUnits;
        const piece = text(random);
        expect(tokens.count(piece), `${encoding}: ${JSON.stringify(piece)}`).toBeLessThanOrEqual(Buffer.byteLength(piece, 'utf8'));
        const message = randomMessage(random, text);
        expect(tokens.boundMessage!(message), `${encoding}: ${JSON.stringify(message)}`).toBeGreaterThanOrEqual(tokens.countMessage(message));
      }
    }
  });

  it('bounds a message from above over real prose and code, by about four times its count (2.5 for JSON)', () => {
    const files = ['README.md', '../shared/DESIGN.md', 'services/runtime/conversation.ts', 'package-lock.json'].flatMap((path) => {
      try {
        return [readFileSync(path, 'utf8')];
      } catch {
        return [];
      }
    });
    expect(files.length).toBeGreaterThan(1);
    for (const encoding of ENCODINGS) {
      const tokens = createTokenCounter(encoding);
      for (const file of files) {
        const message: ChatMessage = { role: 'tool', toolCallId: 'c', name: 'read_file', content: file.slice(0, 50_000) };
        const count = tokens.countMessage(message);
        const bound = tokens.boundMessage!(message);
        expect(bound).toBeGreaterThanOrEqual(count);
        expect(bound).toBeLessThan(count * 5);
      }
    }
  });

  it('bounds an assistant message with its tool calls’ names and arguments, as it counts them', () => {
    const tokens = createTokenCounter();
    const message: ChatMessage = { role: 'assistant', content: 'hi', toolCalls: [{ id: 'c1', name: 'read_file', args: { path: 'é.txt' } }] };
    expect(tokens.boundMessage!(message)).toBe(4 + 2 + 'read_file'.length + Buffer.byteLength('{"path":"é.txt"}'));
    expect(tokens.boundMessage!({ role: 'tool', toolCallId: 'c1', name: 'read_file', content: '' })).toBe(4);
  });
});
