import { describe, expect, it } from 'vitest';
import type { LogEvent } from '../../src/protocol/index.ts';
import { countValidationFailures, decideModel } from '../../services/runtime/models/model-escalation.ts';

const base = {
  smallModel: 'ollama:qwen3',
  largeModel: 'anthropic:claude-sonnet-5',
  complex: false,
  validationFailures: 0,
  contextTokens: 1_000,
  smallContextBudget: 20_000,
};

describe('decideModel', () => {
  it('keeps the small model while nothing calls for the large one', () => {
    expect(decideModel(base)).toEqual({ model: 'ollama:qwen3', escalated: false });
    expect(decideModel({ ...base, validationFailures: 1 })).toEqual({ model: 'ollama:qwen3', escalated: false });
    expect(decideModel({ ...base, contextTokens: 20_000 })).toEqual({ model: 'ollama:qwen3', escalated: false });
  });

  it('escalates a prompt flagged complex from the start', () => {
    expect(decideModel({ ...base, complex: true })).toEqual({ model: 'anthropic:claude-sonnet-5', escalated: true, reason: 'complex' });
  });

  it('escalates after two validation failures, or the configured number', () => {
    expect(decideModel({ ...base, validationFailures: 2 })).toEqual({
      model: 'anthropic:claude-sonnet-5',
      escalated: true,
      reason: 'validation_failures',
    });
    expect(decideModel({ ...base, validationFailures: 1, maxValidationFailures: 1 })).toMatchObject({ escalated: true, reason: 'validation_failures' });
  });

  it('escalates when the context outgrows the small model', () => {
    expect(decideModel({ ...base, contextTokens: 20_001 })).toEqual({ model: 'anthropic:claude-sonnet-5', escalated: true, reason: 'context_window' });
  });

  it('stays on the large model once the turn escalated', () => {
    expect(decideModel({ ...base, escalatedBefore: 'context_window' })).toEqual({
      model: 'anthropic:claude-sonnet-5',
      escalated: true,
      reason: 'context_window',
    });
  });
});

describe('countValidationFailures', () => {
  let seq = 0;
  const event = (type: LogEvent['type'], data: unknown, turnId = 't1') => ({ v: 1, id: `e${++seq}`, type, tenant: 'x', sessionId: 's', turnId, ts: 0, data }) as LogEvent;
  const result = (toolCallId: string, code?: string, turnId = 't1') =>
    event(
      'tool.result',
      { toolCallId, name: 'read_file', output: 'x', isError: code !== undefined, durationMs: 1, ...(code ? { error: { code, message: 'm', retryable: false } } : {}) },
      turnId,
    );

  it('counts invalid_arguments results and unparseable arguments once per call, in this turn only', () => {
    const events = [
      event('assistant.message', {
        text: '',
        toolCalls: [
          { id: 'c1', name: 'read_file', args: { _invalidJson: '{"path": ', _parseError: 'Unexpected end' } },
          { id: 'c2', name: 'read_file', args: { path: 5 } },
          { id: 'c3', name: 'read_file', args: { path: 'a' } },
        ],
        usage: { inputTokens: 0, outputTokens: 0 },
        cost: 0,
        model: 'ollama:qwen3',
        finishReason: 'tool_calls',
      }),
      result('c1', 'invalid_arguments'),
      result('c2', 'invalid_arguments'),
      result('c3', 'tool_failed'),
      result('c9', 'invalid_arguments', 'other-turn'),
    ];
    expect(countValidationFailures(events, 't1')).toBe(2);
    expect(countValidationFailures(events, 'other-turn')).toBe(1);
    expect(countValidationFailures([result('c3')], 't1')).toBe(0);
  });
});
