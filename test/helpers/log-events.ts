import { LogEventType, createEnvelopeFactory } from '../../src/protocol/index.ts';
import type { ChatMessage, EventDataMap, LogEvent } from '../../src/protocol/index.ts';
import type { TokenCounter } from '../../src/tokens.ts';

/** Log events with sequences 1, 2, 3, … as a session log holds them, for transcript and context tests. */
export function createLogBuilder() {
  let seq = 0;
  let id = 0;
  const envelopes = createEnvelopeFactory({ newId: () => `e${id++}`, now: () => 1_700_000_000_000 });
  const event = <T extends LogEventType>(type: T, turnId: string | undefined, data: EventDataMap[T]): LogEvent =>
    ({ ...envelopes.create(type, { tenant: 't', sessionId: 's', ...(turnId ? { turnId, step: 1 } : {}) }, data), seq: ++seq }) as LogEvent;
  const usage = { inputTokens: 1, outputTokens: 1 };
  return {
    prompt: (turnId: string, text: string) => event(LogEventType.userMessage, turnId, { text }),
    steer: (turnId: string, text: string) => event(LogEventType.userMessage, turnId, { text, steer: true }),
    answer: (turnId: string, text: string, calls: Array<{ id: string; name?: string }> = []) =>
      event(LogEventType.assistantMessage, turnId, {
        text,
        toolCalls: calls.map((call) => ({ id: call.id, name: call.name ?? 'lookup', args: {} })),
        usage,
        cost: 0,
        model: 'scripted:default',
        finishReason: calls.length > 0 ? 'tool_calls' : 'stop',
      }),
    toolUse: (turnId: string, toolCallId: string, hooked: { args?: unknown; argsRewrittenBy?: string[]; blockedBy?: string; argsFinal?: boolean } = {}) =>
      event(LogEventType.toolUse, turnId, { toolCallId, effectId: `s:${turnId}:${toolCallId}`, name: 'lookup', args: {}, tier: 'read_only', ...hooked }),
    result: (turnId: string, toolCallId: string, output: string) =>
      event(LogEventType.toolResult, turnId, { toolCallId, name: 'lookup', output, isError: false, durationMs: 1 }),
    started: (turnId: string) => event(LogEventType.turnStarted, turnId, { model: 'scripted:default', maxSteps: 8, deadline: 1_700_000_900_000, finalAnswer: true }),
    ended: (turnId: string) => event(LogEventType.turnEnded, turnId, { reason: 'yielded', usage, cost: 0, steps: 1 }),
    summary: (turnId: string, text: string, throughSeq: number) => event(LogEventType.summaryCreated, turnId, { text, throughSeq, tokens: 1 }),
    created: () => event(LogEventType.sessionCreated, undefined, { createdBy: 'node' }),
  };
}

/** A token counter that counts characters (plus 1 per message), and how many messages it was asked to count. */
export function createCharCounter(): TokenCounter & { readonly calls: () => number } {
  let calls = 0;
  return {
    count: (text) => text.length,
    countMessage: (message: ChatMessage) => {
      calls += 1;
      return message.content.length + 1;
    },
    calls: () => calls,
  };
}
