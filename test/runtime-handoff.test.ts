import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { z } from 'zod';
import { defineTool } from '../src/tool-sdk/index.ts';
import { collectEvents, requestJson, startStack } from './helpers/stack.ts';
import type { TestStack } from './helpers/stack.ts';

let stack: TestStack;
const effects: string[] = [];
let release: () => void = () => {};
const released = new Promise<void>((resolve) => {
  release = resolve;
});

const wait = defineTool({
  name: 'wait_for_release',
  description: 'waits until the test releases it',
  parameters: z.object({}),
  tier: 'side_effecting',
  timeoutMs: 60_000,
  idempotent: true,
  execute: async (_args, { effectId }) => {
    effects.push(effectId);
    await released;
    return 'released';
  },
});

beforeAll(async () => {
  stack = await startStack({
    script: { responses: [{ toolCalls: [{ name: 'wait_for_release', args: {} }] }, { text: 'done after the handoff' }] },
    extraTools: [wait],
  });
});

afterAll(async () => {
  release();
  await stack?.stop();
});

describe('a runtime that stops gracefully mid-turn', () => {
  it('leaves the session to another runtime, which finishes the turn with the same effectId', async () => {
    const watcher = collectEvents(stack.client, 'acme', 'handoff-1');
    await requestJson(stack.client, 'agentbus.acme.sessions.handoff-1.prompt', { text: 'go' });
    await expect.poll(() => effects.length, { timeout: 10_000 }).toBe(1);
    await stack.runtime.stop();
    await stack.startRuntime();
    await expect.poll(() => effects.length, { timeout: 10_000 }).toBe(2);
    release();
    const events = await watcher.until((seen) => seen.some((event) => event.type === 'turn.ended'), 10_000);
    expect(events.find((event) => event.type === 'turn.ended')).toMatchObject({ data: { reason: 'yielded', text: 'done after the handoff' } });
    expect(new Set(effects).size).toBe(1);
    expect(events.filter((event) => event.type === 'tool.result')).toHaveLength(1);
    watcher.stop();
  });
});
