import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import type { AgentEvent } from '../../src/protocol/index.ts';
import { createScriptedAdapter } from '../../services/provider/index.ts';
import { collectEvents, requestJson, startStack } from '../helpers/stack.ts';
import type { TestStack } from '../helpers/stack.ts';
import { createLaunchTool } from '../helpers/launch-tool.ts';

let stack: TestStack;
const { tool: launch, launched } = createLaunchTool();

const approvalRequested = (events: AgentEvent[]) => events.find((event) => event.type === 'approval.requested');

beforeAll(async () => {
  stack = await startStack({
    script: { responses: [{ toolCalls: [{ name: 'launch', args: { target: 'probe' } }] }, { text: 'all set' }] },
    extraTools: [launch],
  });
});

afterAll(() => stack?.stop());

describe('a privileged tool call', () => {
  it('waits in AwaitingApproval and runs once approved', async () => {
    const watcher = collectEvents(stack.client, 'default', 'approve-1');
    await requestJson(stack.client, 'agentbus.default.sessions.approve-1.prompt', { text: 'launch it' });
    const events = await watcher.until((seen) => approvalRequested(seen) !== undefined);
    expect(events.some((event) => event.type === 'state' && event.data.value === 'AwaitingApproval')).toBe(true);
    expect(launched).toEqual([]);
    const request = approvalRequested(events);
    const toolCallId = request?.type === 'approval.requested' ? request.data.toolCallId : '';

    const wrong = await requestJson(stack.client, 'agentbus.default.sessions.approve-1.approve', { toolCallId: 'nope', approved: true });
    expect(wrong).toMatchObject({ ok: false, error: { code: 'not_found' } });
    const reply = await requestJson(stack.client, 'agentbus.default.sessions.approve-1.approve', { toolCallId, approved: true });
    expect(reply).toMatchObject({ ok: true });

    const done = await watcher.until((seen) => seen.some((event) => event.type === 'turn.ended'));
    expect(launched).toEqual(['probe']);
    const types = done.map((event) => event.type);
    expect(types.indexOf('approval.decided')).toBeLessThan(types.indexOf('tool.use'));
    expect(done.find((event) => event.type === 'turn.ended')).toMatchObject({ data: { reason: 'yielded', text: 'all set' } });
    watcher.stop();
  });

  it('is closed with a denied error result when refused, and the turn goes on', async () => {
    const watcher = collectEvents(stack.client, 'default', 'approve-2');
    await requestJson(stack.client, 'agentbus.default.sessions.approve-2.prompt', { text: 'launch it' });
    const events = await watcher.until((seen) => approvalRequested(seen) !== undefined);
    const request = approvalRequested(events);
    const toolCallId = request?.type === 'approval.requested' ? request.data.toolCallId : '';
    await requestJson(stack.client, 'agentbus.default.sessions.approve-2.approve', { toolCallId, approved: false, reason: 'not today' });
    const done = await watcher.until((seen) => seen.some((event) => event.type === 'turn.ended'));
    expect(done.find((event) => event.type === 'tool.result')).toMatchObject({
      data: { isError: true, error: { code: 'denied', message: 'approval denied: not today' } },
    });
    expect(done.find((event) => event.type === 'turn.ended')).toMatchObject({ data: { reason: 'yielded' } });
    expect(launched).toEqual(['probe']);
    watcher.stop();
  });
});

describe('privileged calls of a model that names every call call_0', () => {
  let reusing: TestStack;
  const targets = (events: AgentEvent[]) => events.filter((event) => event.type === 'approval.requested').length;

  beforeAll(async () => {
    const script = {
      responses: [
        { toolCalls: [{ name: 'launch', args: { target: 'first' } }] },
        { toolCalls: [{ name: 'launch', args: { target: 'second' } }] },
        { text: 'both done' },
      ],
    };
    reusing = await startStack({ script, extraTools: [launch], adapters: [createScriptedAdapter({ script, toolCallId: () => 'call_0' })] });
  });

  afterAll(() => reusing?.stop());

  it('asks for each step’s approval, and takes a second approval of the same id', async () => {
    const watcher = collectEvents(reusing.client, 'default', 'reused-1');
    await requestJson(reusing.client, 'agentbus.default.sessions.reused-1.prompt', { text: 'launch twice' });
    await watcher.until((seen) => targets(seen) === 1);
    expect(await requestJson(reusing.client, 'agentbus.default.sessions.reused-1.approve', { toolCallId: 'call_0', approved: true })).toMatchObject({ ok: true });
    await watcher.until((seen) => targets(seen) === 2);
    // Step 2's call waits for its own approval: step 1's does not stand for it.
    expect(launched.filter((target) => target === 'second')).toEqual([]);
    expect(await requestJson(reusing.client, 'agentbus.default.sessions.reused-1.approve', { toolCallId: 'call_0', approved: false, reason: 'once is enough' })).toMatchObject({ ok: true });
    const done = await watcher.until((seen) => seen.some((event) => event.type === 'turn.ended'));
    expect(launched.filter((target) => target === 'first' || target === 'second')).toEqual(['first']);
    expect(done.filter((event) => event.type === 'approval.decided').map((event) => event.step)).toEqual([1, 2]);
    expect(done.find((event) => event.type === 'turn.ended')).toMatchObject({ data: { reason: 'yielded', text: 'both done' } });
    watcher.stop();
  });
});
