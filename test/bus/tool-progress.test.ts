import { setTimeout as sleep } from 'node:timers/promises';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { z } from 'zod';
import type { AgentEvent } from '../../src/protocol/index.ts';
import { formatEvent } from '../../cli/format.ts';
import { defineTool } from '../../src/tool-sdk/index.ts';
import { collectEvents, requestJson, startStack } from '../helpers/stack.ts';
import type { TestStack } from '../helpers/stack.ts';

// A tool's context.progress, end to end: worker → heartbeat channel → runtime → `tool.progress` live events.

const copyFiles = defineTool({
  name: 'copy_files',
  description: 'Copies files, reporting as it goes',
  parameters: z.object({ count: z.number().int().min(1).max(10) }),
  tier: 'side_effecting',
  timeoutMs: 10_000,
  idempotent: true,
  async execute({ count }, { progress, signal }) {
    for (let copied = 1; copied <= count; copied++) {
      await sleep(150, undefined, { signal });
      // A secret in a progress message must not reach anyone watching.
      progress({ message: copied === 1 ? 'started with token ghp_0123456789abcdefghijklmnopqrstuvwxyzAB' : `copied ${copied} of ${count}`, progress: copied, total: count });
    }
    return `copied ${count} files`;
  },
});

let stack: TestStack;

beforeAll(async () => {
  stack = await startStack({
    script: { responses: [{ toolCalls: [{ name: 'copy_files', args: { count: 4 } }] }, { text: 'all copied' }] },
    extraTools: [copyFiles],
  });
});

afterAll(async () => {
  await stack?.stop();
});

describe('tool progress', () => {
  it("reaches the session's watchers as tool.progress live events, in order, scrubbed, before the result", async () => {
    const events = collectEvents(stack.client, 'acme', 'progress-1');
    expect(await requestJson(stack.client, 'agentbus.acme.sessions.progress-1.prompt', { text: 'copy them' })).toMatchObject({ accepted: true });
    const seen = await events.until((all) => all.some((event) => event.type === 'turn.ended'), 15_000);
    events.stop();
    const progress = seen.filter((event): event is Extract<AgentEvent, { type: 'tool.progress' }> => event.type === 'tool.progress');
    const use = seen.find((event): event is Extract<AgentEvent, { type: 'tool.use' }> => event.type === 'tool.use');
    expect(progress.map((event) => event.data.progress)).toEqual([1, 2, 3, 4]);
    expect(progress[3]).toMatchObject({ turnId: use!.turnId, step: 1, data: { toolCallId: use!.data.toolCallId, name: 'copy_files', message: 'copied 4 of 4', total: 4 } });
    expect(progress[0]!.data.message).not.toContain('ghp_');
    expect(seen.indexOf(progress[3]!)).toBeLessThan(seen.findIndex((event) => event.type === 'tool.result'));
    expect(formatEvent(progress[3]!)).toContain('copy_files: copied 4 of 4 (4/4)');
    expect(seen.find((event) => event.type === 'turn.ended')).toMatchObject({ data: { reason: 'yielded', text: 'all copied' } });
  });
});
