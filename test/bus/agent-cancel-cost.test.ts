import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import type { AgentEvent } from '../../src/protocol/index.ts';
import { parseProfiles } from '../../services/runtime/agents/profiles.ts';
import { collectEvents, requestJson, startStack } from '../helpers/stack.ts';
import type { TestStack } from '../helpers/stack.ts';
import { createGateTool } from '../helpers/gate-tool.ts';
import type { GateTool } from '../helpers/gate-tool.ts';

// A caller cancelled while its agent call runs: the child is cancelled with it, and what the child spent until its end
// counts in the caller's turn.ended. The caller forces its agent call (no model asked, cost 0); the child's one provider
// call costs 0.25 and asks for a tool that waits until cancelled. One script cursor per session.

let stack: TestStack;
let gate: GateTool;

beforeAll(async () => {
  gate = createGateTool('wait_here');
  stack = await startStack({
    script: { responses: [{ text: 'working on it', toolCalls: [{ name: 'wait_here', args: {} }], cost: 0.25, usage: { inputTokens: 100, outputTokens: 20 } }] },
    extraTools: [gate.tool],
    profiles: parseProfiles({ profiles: [{ tenant: 'default', name: 'helper', description: 'Helps.', tools: ['wait_here'] }] }),
  });
});

afterAll(() => {
  gate?.open();
  return stack?.stop();
});

type Of<T extends AgentEvent['type']> = Extract<AgentEvent, { type: T }>;
const first = <T extends AgentEvent['type']>(events: readonly AgentEvent[], type: T) => events.find((event): event is Of<T> => event.type === type);

describe('a caller cancelled mid agent call', () => {
  it('counts what the child turn spent until its end in its own turn.ended and in the closing tool.result', async () => {
    const watcher = collectEvents(stack.client, 'default', 'cancel-cost-1');
    try {
      expect(await requestJson(stack.client, 'agentbus.default.sessions.cancel-cost-1.prompt', { text: 'delegate', forceTool: { name: 'agent__helper', args: { task: 'wait' } } })).toMatchObject({ accepted: true });
      const started = await watcher.until((seen) => seen.some((event) => event.type === 'tool.use'));
      const childSessionId = first(started, 'tool.use')?.data.childSessionId ?? '';
      expect(childSessionId).toMatch(/^sub-/);
      // Wait until the child has made its provider call and is waiting in its tool.
      const child = collectEvents(stack.client, 'default', childSessionId);
      try {
        await child.until((seen) => seen.some((event) => event.type === 'tool.use'));
      } finally {
        child.stop();
      }
      stack.client.publish('agentbus.default.sessions.cancel-cost-1.cancel', new TextEncoder().encode(JSON.stringify({ reason: 'stop' })));
      const events = await watcher.until((seen) => seen.some((event) => event.type === 'turn.ended'));
      expect(first(events, 'tool.result')).toMatchObject({ data: { name: 'agent__helper', isError: true, error: { code: 'cancelled' }, child: { sessionId: childSessionId }, cost: 0.25, usage: { inputTokens: 100, outputTokens: 20 } } });
      expect(first(events, 'turn.ended')).toMatchObject({ data: { reason: 'cancelled', cost: 0.25, usage: { inputTokens: 100, outputTokens: 20 } } });
    } finally {
      watcher.stop();
    }
  });
});
