import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import type { AgentEvent } from '../../src/protocol/index.ts';
import { collectEvents, requestJson, requestRaw, startStack } from '../helpers/stack.ts';
import type { TestStack } from '../helpers/stack.ts';
import { createGateTool } from '../helpers/gate-tool.ts';

const ended = (events: AgentEvent[]) => events.filter((event) => event.type === 'turn.ended');
const endedCount = (count: number) => (events: AgentEvent[]) => ended(events).length >= count;

describe('an unknown tool', () => {
  let stack: TestStack;
  beforeAll(async () => {
    stack = await startStack({
      script: {
        responses: [
          { toolCalls: [{ name: 'no_such_tool', args: {} }] },
          { toolCalls: [{ name: 'list_dir', args: { path: '.' } }] },
          { text: 'Found the README.' },
        ],
      },
    });
  });
  afterAll(() => stack?.stop());

  it('becomes an error result and the model corrects itself', async () => {
    const watcher = collectEvents(stack.client, 'default', 'unknown-1');
    await requestJson(stack.client, 'agentbus.default.sessions.unknown-1.prompt', { text: 'look around' });
    const events = await watcher.until(endedCount(1));
    const results = events.flatMap((event) => (event.type === 'tool.result' ? [event.data] : []));
    expect(results).toHaveLength(2);
    expect(results[0]).toMatchObject({ name: 'no_such_tool', isError: true, error: { code: 'unknown_tool' } });
    expect(results[0]?.output).toContain('list_dir');
    expect(results[1]).toMatchObject({ name: 'list_dir', isError: false });
    expect(results[1]?.output).toContain('README.md');
    expect(ended(events)[0]).toMatchObject({ data: { reason: 'yielded', text: 'Found the README.', steps: 3 } });
    watcher.stop();
  });
});

describe('cancel', () => {
  let stack: TestStack;
  beforeAll(async () => {
    stack = await startStack({
      script: {
        responses: [{ text: 'This answer streams very slowly, two characters at a time, for a long while.', chunkSize: 2, delayMs: 100 }],
      },
    });
  });
  afterAll(() => stack?.stop());

  it('while streaming ends the turn cancelled within 2 s and the provider stops streaming', async () => {
    const watcher = collectEvents(stack.client, 'default', 'cancel-1');
    await requestJson(stack.client, 'agentbus.default.sessions.cancel-1.prompt', { text: 'talk slowly' });
    await watcher.until((events) => events.some((event) => event.type === 'assistant.delta'));
    const started = Date.now();
    const reply = await requestJson(stack.client, 'agentbus.default.sessions.cancel-1.cancel', {});
    expect(reply).toMatchObject({ ok: true });
    const events = await watcher.until(endedCount(1), 2000);
    expect(Date.now() - started).toBeLessThan(2000);
    expect(ended(events)[0]).toMatchObject({ data: { reason: 'cancelled' } });
    const deltas = events.filter((event) => event.type === 'assistant.delta').length;
    await new Promise((resolve) => setTimeout(resolve, 400));
    expect(watcher.events.filter((event) => event.type === 'assistant.delta').length).toBe(deltas);
    watcher.stop();
  });

  it('of an idle session is answered with a clear error', async () => {
    const watcher = collectEvents(stack.client, 'default', 'idle-1');
    await requestJson(stack.client, 'agentbus.default.sessions.idle-1.prompt', 'hello');
    await watcher.until(endedCount(1));
    const reply = await requestJson(stack.client, 'agentbus.default.sessions.idle-1.cancel', {});
    expect(reply).toMatchObject({ ok: false, error: { code: 'not_found', message: expect.stringContaining('no running turn') } });
    watcher.stop();
  });

  it('of a session that never existed is refused without creating it', async () => {
    const watcher = collectEvents(stack.client, 'default', 'never-1');
    for (const verb of ['cancel', 'steer', 'approve']) {
      const body = verb === 'approve' ? { toolCallId: 'x', approved: true } : verb === 'steer' ? { text: 'hi' } : {};
      const reply = await requestJson(stack.client, `agentbus.default.sessions.never-1.${verb}`, body);
      expect(reply).toMatchObject({ ok: false, error: { code: 'not_found', message: 'session default/never-1 does not exist' } });
    }
    await new Promise((resolve) => setTimeout(resolve, 200));
    expect(watcher.events.filter((event) => event.type === 'session.created')).toHaveLength(0);
    watcher.stop();
  });
});

describe('cancel while a tool runs', () => {
  let stack: TestStack;
  const slow = createGateTool('slow_tool');
  beforeAll(async () => {
    stack = await startStack({ script: { responses: [{ toolCalls: [{ name: 'slow_tool', args: {} }] }] }, extraTools: [slow.tool] });
  });
  afterAll(() => {
    slow.open();
    return stack?.stop();
  });

  it('aborts the tool on its worker and closes the call with a cancelled result', async () => {
    const watcher = collectEvents(stack.client, 'default', 'cancel-tool');
    await requestJson(stack.client, 'agentbus.default.sessions.cancel-tool.prompt', { text: 'run the slow tool' });
    await watcher.until((events) => events.some((event) => event.type === 'tool.use'));
    await new Promise((resolve) => setTimeout(resolve, 100));
    await requestJson(stack.client, 'agentbus.default.sessions.cancel-tool.cancel', { reason: 'user stopped it' });
    const events = await watcher.until(endedCount(1), 2000);
    const result = events.find((event) => event.type === 'tool.result');
    expect(result).toMatchObject({ data: { name: 'slow_tool', isError: true, error: { code: 'cancelled' } } });
    expect(ended(events)[0]).toMatchObject({ data: { reason: 'cancelled' } });
    await expect.poll(() => slow.aborted(), { timeout: 2000 }).toBe(1);
    watcher.stop();
  });
});

describe('budgets and queueing', () => {
  let stack: TestStack;
  beforeAll(async () => {
    stack = await startStack({
      script: {
        responses: [
          { text: 'first answer', chunkSize: 1, delayMs: 10 },
          { toolCalls: [{ name: 'list_dir', args: { path: '.' } }] },
          { toolCalls: [{ name: 'list_dir', args: { path: '.' } }] },
          { toolCalls: [{ name: 'list_dir', args: { path: '.' } }] },
        ],
      },
    });
  });
  afterAll(() => stack?.stop());

  it('runs two prompts on one session one after the other, in order', async () => {
    const watcher = collectEvents(stack.client, 'default', 'queue-1');
    const first = await requestJson(stack.client, 'agentbus.default.sessions.queue-1.prompt', { text: 'one' });
    const second = await requestJson(stack.client, 'agentbus.default.sessions.queue-1.prompt', { text: 'two', maxSteps: 1 });
    expect(first.accepted && second.accepted).toBe(true);
    const events = await watcher.until(endedCount(2));
    const endings = ended(events);
    expect(endings.map((event) => event.turnId)).toEqual([first.turnId, second.turnId]);
    // Nothing of the second turn runs before the first has ended.
    const firstEnd = events.indexOf(endings[0]!);
    const secondStart = events.findIndex((event) => event.type === 'state' && event.turnId === second.turnId && event.data.machine === 'turn');
    expect(secondStart).toBeGreaterThan(firstEnd);
    expect(endings[0]).toMatchObject({ data: { reason: 'yielded', text: 'first answer' } });
    // The second turn asks for a tool at its only step: the step budget ends it.
    expect(endings[1]).toMatchObject({ data: { reason: 'budget_exceeded', steps: 1 } });
    watcher.stop();
  });

  it('ends a turn budget_exceeded when maxSteps runs out', async () => {
    const watcher = collectEvents(stack.client, 'default', 'steps-1');
    await requestJson(stack.client, 'agentbus.default.sessions.steps-1.prompt', { text: 'one' });
    await watcher.until(endedCount(1));
    await requestJson(stack.client, 'agentbus.default.sessions.steps-1.prompt', { text: 'loop', maxSteps: 2 });
    const events = await watcher.until(endedCount(2));
    const ending = ended(events)[1];
    expect(ending).toMatchObject({ data: { reason: 'budget_exceeded', steps: 2 } });
    const uses = events.filter((event) => event.type === 'tool.use' && event.turnId === ending?.turnId);
    const results = events.filter((event) => event.type === 'tool.result' && event.turnId === ending?.turnId);
    expect(uses).toHaveLength(2);
    expect(results).toHaveLength(2);
    watcher.stop();
  });
});

describe('bad input', () => {
  let stack: TestStack;
  beforeAll(async () => {
    stack = await startStack({ script: { responses: [{ text: 'slow and steady wins', chunkSize: 1, delayMs: 20 }] } });
  });
  afterAll(() => stack?.stop());

  it('gets an error reply and harms no other session', async () => {
    const watcher = collectEvents(stack.client, 'default', 'good-1');
    await requestJson(stack.client, 'agentbus.default.sessions.good-1.prompt', { text: 'hello' });

    const malformed = await requestRaw(stack.client, 'agentbus.default.sessions.bad-1.prompt', '{"text": broken', 'application/json');
    expect(malformed).toMatchObject({ accepted: false, sessionId: 'bad-1', error: { code: 'invalid_input' } });
    expect(malformed.error?.message).toMatch(/JSON/);
    const garbage = await requestRaw(stack.client, 'agentbus.default.sessions.bad-1.prompt', new Uint8Array([0xc1, 0xff, 0x00]), 'application/msgpack');
    expect(garbage).toMatchObject({ accepted: false, error: { code: 'invalid_input' } });
    const badSubject = await requestRaw(stack.client, 'agentbus.default.sessions.bad$id.prompt', 'hi');
    expect(badSubject).toMatchObject({ accepted: false, error: { code: 'invalid_input' } });
    const tooBig = await requestRaw(stack.client, 'agentbus.default.sessions.bad-1.prompt', 'x'.repeat(1024 * 1024 - 4096), 'text/plain');
    expect(tooBig.accepted).toBe(false);
    const unknownField = await requestJson(stack.client, 'agentbus.default.sessions.bad-1.prompt', { text: 'hi', surprise: true });
    expect(unknownField).toMatchObject({ accepted: false, error: { code: 'invalid_input' } });
    expect(unknownField.error?.message).toContain('surprise');
    const empty = await requestJson(stack.client, 'agentbus.default.sessions.bad-1.prompt', { text: '' });
    expect(empty).toMatchObject({ accepted: false, error: { code: 'invalid_input' } });
    const badModel = await requestJson(stack.client, 'agentbus.default.sessions.bad-1.prompt', { text: 'x', model: 'no-provider' });
    expect(badModel).toMatchObject({ accepted: false, error: { code: 'invalid_input' } });

    const events = await watcher.until(endedCount(1));
    expect(ended(events)[0]).toMatchObject({ data: { reason: 'yielded', text: 'slow and steady wins' } });
    watcher.stop();
  });
});
