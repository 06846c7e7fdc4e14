import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import type { AgentEvent } from '../../src/protocol/index.ts';
import { collectEvents, requestJson, startStack } from '../helpers/stack.ts';
import type { TestStack } from '../helpers/stack.ts';
import { createLaunchTool } from '../helpers/launch-tool.ts';

// A prompt's forceTool on a privileged tool: the forced call takes the normal path (approval, then the worker), and
// the model is first asked at step 2. The script's only response is that step's answer.

let stack: TestStack;
const { tool: launch, launched } = createLaunchTool();

beforeAll(async () => {
  stack = await startStack({ script: { responses: [{ text: 'all set' }] }, extraTools: [launch] });
});

afterAll(() => stack?.stop());

describe('a forced tool call', () => {
  it('is logged as a forced assistant message, waits for approval as any privileged call, and the model answers at step 2', async () => {
    const watcher = collectEvents(stack.client, 'default', 'forced-1');
    const accepted = await requestJson(stack.client, 'agentbus.default.sessions.forced-1.prompt', { text: 'launch it', forceTool: { name: 'launch', args: { target: 'forced' } } });
    expect(accepted).toMatchObject({ accepted: true });
    const events = await watcher.until((seen) => seen.some((event) => event.type === 'approval.requested'));
    expect(launched).toEqual([]);
    const forced = events.find((event): event is Extract<AgentEvent, { type: 'assistant.message' }> => event.type === 'assistant.message');
    expect(forced).toMatchObject({ step: 1, data: { forced: true, text: '', cost: 0, usage: { inputTokens: 0, outputTokens: 0 }, toolCalls: [{ name: 'launch', args: { target: 'forced' } }] } });
    const toolCallId = forced?.data.toolCalls[0]?.id ?? '';
    expect(toolCallId).toMatch(/^forced_/);
    expect(await requestJson(stack.client, 'agentbus.default.sessions.forced-1.approve', { toolCallId, approved: true })).toMatchObject({ ok: true });

    const done = await watcher.until((seen) => seen.some((event) => event.type === 'turn.ended'));
    expect(launched).toEqual(['forced']);
    expect(done.find((event) => event.type === 'tool.use')).toMatchObject({ step: 1, data: { toolCallId, name: 'launch', tier: 'privileged' } });
    expect(done.find((event) => event.type === 'turn.ended')).toMatchObject({ data: { reason: 'yielded', text: 'all set', steps: 2 } });
    watcher.stop();
  });

  it('is refused before anything is logged when its arguments do not match the schema', async () => {
    const refused = await requestJson(stack.client, 'agentbus.default.sessions.forced-2.prompt', { text: 'launch it', forceTool: { name: 'launch', args: { target: 3 } } });
    expect(refused).toMatchObject({ accepted: false, error: { code: 'invalid_arguments', message: expect.stringContaining('arguments do not match the schema of launch: target:') } });
    expect(launched).toEqual(['forced']);
  });
});
