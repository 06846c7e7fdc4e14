import { describe, expect, it } from 'vitest';
import { checkForcedCall, loggedPrompt } from '../../services/runtime/sessions/prompt-input.ts';
import { createTranscript } from '../../services/runtime/sessions/transcript.ts';
import { forcedStep } from '../../services/runtime/turn/forced-step.ts';
import type { ToolInfo } from '../../services/runtime/ports.ts';
import { createCodec, createEnvelopeFactory, promptSchema } from '../../src/protocol/index.ts';

const readFile: ToolInfo = {
  name: 'read_file',
  description: 'Reads a file',
  parameters: { type: 'object', properties: { path: { type: 'string', minLength: 1 }, limit: { type: 'integer', minimum: 1 } }, required: ['path'], additionalProperties: false },
  tier: 'read_only',
  timeoutMs: 1000,
  idempotent: true,
};

describe('a prompt as logged', () => {
  it('appends each attachment to the text in a named block and lists it, and never logs dryRun', () => {
    const logged = loggedPrompt({ text: 'Review these', dryRun: false, attachments: [{ name: 'a.ts', content: 'let x = 1;\n' }, { name: 'notes "draft".md', content: 'no newline' }] });
    expect(logged).toEqual({
      text: 'Review these\n\n<file name="a.ts">\nlet x = 1;\n</file>\n\n<file name="notes \\"draft\\".md">\nno newline\n</file>',
      files: [
        { name: 'a.ts', chars: 11 },
        { name: 'notes "draft".md', chars: 10 },
      ],
    });
    expect(loggedPrompt({ text: 'plain', maxSteps: 2, forceFinish: true })).toEqual({ text: 'plain', maxSteps: 2, forceFinish: true });
  });

  it('refuses attachments past the limits, and forceTool with forceFinish', () => {
    const codec = createCodec();
    const check = (value: unknown) => () => codec.validate(promptSchema, value, 'prompt');
    expect(check({ text: 'x', attachments: [{ name: 'big', content: 'x'.repeat(256 * 1024 + 1) }] })).toThrow(/attachments\[\]\.content must be at most 262144 characters/);
    expect(check({ text: 'x'.repeat(900_000), attachments: [{ name: 'a', content: 'x'.repeat(200_000) }] })).toThrow(/text and attachments together must be at most 1000000 characters/);
    expect(check({ text: 'x', attachments: Array.from({ length: 17 }, () => ({ name: 'a', content: '' })) })).toThrow(/attachments/);
    expect(check({ text: 'x', forceTool: { name: 'read_file', args: {} }, forceFinish: true })).toThrow(/forceTool and forceFinish exclude each other/);
    expect(check({ text: 'x', forceTool: { name: 'read_file', args: [] } })).toThrow(/forceTool\.args/);
  });
});

describe('a forced call', () => {
  it('is checked against the discovered tools and the arguments against its schema', () => {
    expect(() => checkForcedCall([readFile], { name: 'read_file', args: { path: 'README.md' } })).not.toThrow();
    expect(() => checkForcedCall([readFile], { name: 'read', args: {} })).toThrow(/no live worker serves a tool named "read"; tools: read_file$/);
    expect(() => checkForcedCall([], { name: 'read', args: {} })).toThrow(/tools: \(none\)/);
    expect(() => checkForcedCall([readFile], { name: 'read_file', args: { path: '' } })).toThrow(/arguments do not match the schema of read_file: path: /);
    expect(() => checkForcedCall([readFile], { name: 'read_file', args: { path: 'a', extra: 1 } })).toThrow(/arguments do not match/);
    const codeOf = (call: { name: string; args: Record<string, unknown> }) => {
      try {
        checkForcedCall([readFile], call);
      } catch (error) {
        return (error as { code?: string }).code;
      }
      return undefined;
    };
    expect(codeOf({ name: 'read_file', args: {} })).toBe('invalid_arguments');
    expect(codeOf({ name: 'nope', args: {} })).toBe('unknown_tool');
  });

  it('is read from the turn prompt as logged, for the first step only', () => {
    const envelopes = createEnvelopeFactory({ newId: () => 'e', now: () => 1 });
    const scope = { tenant: 't', sessionId: 's', turnId: 'turn-1' };
    const prompt = { ...envelopes.create('user.message', scope, { text: 'go', forceTool: { name: 'read_file', args: { path: 'a' } } }), seq: 1 };
    const steer = { ...envelopes.create('user.message', { ...scope, step: 1 }, { text: 'also', steer: true }), seq: 2 };
    const transcript = createTranscript([prompt, steer]);
    expect(forcedStep(transcript, 'turn-1', 1)).toEqual({ forceTool: { name: 'read_file', args: { path: 'a' } } });
    expect(forcedStep(transcript, 'turn-1', 2)).toBeUndefined();
    expect(forcedStep(transcript, 'turn-2', 1)).toBeUndefined();
    const finishing = createTranscript([{ ...envelopes.create('user.message', scope, { text: 'go', forceFinish: true }), seq: 1 }]);
    expect(forcedStep(finishing, 'turn-1', 1)).toEqual({ forceFinish: true });
  });
});
