import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { collectEvents, requestJson, startStack } from '../helpers/stack.ts';
import type { TestStack } from '../helpers/stack.ts';
import { createGateTool } from '../helpers/gate-tool.ts';

let stack: TestStack;
const gate = createGateTool('wait_for_release');

beforeAll(async () => {
  stack = await startStack({
    script: { responses: [{ toolCalls: [{ name: 'wait_for_release', args: {} }] }, { text: 'done after the handoff' }] },
    extraTools: [gate.tool],
  });
});

afterAll(async () => {
  gate.open();
  await stack?.stop();
});

describe('a runtime that stops gracefully mid-turn', () => {
  it('leaves the session to another runtime, which finishes the turn with the same effectId', async () => {
    const watcher = collectEvents(stack.client, 'acme', 'handoff-1');
    await requestJson(stack.client, 'agentbus.acme.sessions.handoff-1.prompt', { text: 'go' });
    await expect.poll(() => gate.effects.length, { timeout: 10_000 }).toBe(1);
    await stack.runtime.stop();
    await stack.startRuntime();
    await expect.poll(() => gate.effects.length, { timeout: 10_000 }).toBe(2);
    gate.open();
    const events = await watcher.until((seen) => seen.some((event) => event.type === 'turn.ended'), 10_000);
    expect(events.find((event) => event.type === 'turn.ended')).toMatchObject({ data: { reason: 'yielded', text: 'done after the handoff' } });
    expect(new Set(gate.effects).size).toBe(1);
    expect(events.filter((event) => event.type === 'tool.result')).toHaveLength(1);
    watcher.stop();
  });
});
