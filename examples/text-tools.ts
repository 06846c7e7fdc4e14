// A module of tools for `agentbus worker`: export defineTool results (one by one, or in an array) and run
//   npx agentbus worker examples/text-tools.ts
// Outside this repository, import from 'agentbus/tool-sdk' and 'agentbus/protocol' instead.
import { z } from 'zod';
import { SafetyTier } from '../src/protocol/index.ts';
import { defineTool } from '../src/tool-sdk/index.ts';

/** `shout`: the text in capitals. */
export const shout = defineTool({
  name: 'shout',
  description: 'Return the text in capital letters.',
  parameters: z.strictObject({ text: z.string().max(10_000).describe('The text to shout') }),
  tier: SafetyTier.readOnly,
  timeoutMs: 5_000,
  idempotent: true,
  execute: ({ text }) => text.toUpperCase(),
});

/** `word_count`: words, lines and characters of a text. */
export const wordCount = defineTool({
  name: 'word_count',
  description: 'Count the words, lines and characters of a text.',
  parameters: z.strictObject({ text: z.string().max(1_000_000).describe('The text to count') }),
  tier: SafetyTier.readOnly,
  timeoutMs: 5_000,
  idempotent: true,
  execute: ({ text }) => ({
    words: text.split(/\s+/).filter(Boolean).length,
    lines: text === '' ? 0 : text.split('\n').length,
    characters: [...text].length,
  }),
});

export default [shout, wordCount];
