import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { createCodec } from '../../src/protocol/index.ts';
import type { GenerateRequest } from '../../src/protocol/index.ts';
import { createGateTool } from '../helpers/gate-tool.ts';
import { collectEvents, requestJson, startStack } from '../helpers/stack.ts';
import type { TestStack } from '../helpers/stack.ts';

let stack: TestStack;
const gate = createGateTool('hold');
const codec = createCodec();

beforeAll(async () => {
  stack = await startStack({
    script: { responses: [{ toolCalls: [{ name: 'hold', args: {} }] }, { text: 'steered answer' }] },
    extraTools: [gate.tool],
  });
});

afterAll(async () => {
  gate.open();
  await stack?.stop();
});

describe('steer', () => {
  it('injects the message at the start of the next step, after the tool results', async () => {
    const requests: GenerateRequest[] = [];
    const spy = stack.client.subscribe('agentbus.provider.scripted.generate', {
      callback: (_error, message) => {
        requests.push(codec.decode(message.data, message.headers?.get('Content-Type')) as GenerateRequest);
      },
    });
    const watcher = collectEvents(stack.client, 'default', 'steer-1');
    await requestJson(stack.client, 'agentbus.default.sessions.steer-1.prompt', { text: 'start' });
    await expect.poll(() => gate.effects.length, { timeout: 10_000 }).toBe(1);
    const reply = await requestJson(stack.client, 'agentbus.default.sessions.steer-1.steer', { text: 'also check the tests' });
    expect(reply).toMatchObject({ ok: true });
    gate.open();
    const events = await watcher.until((seen) => seen.some((event) => event.type === 'turn.ended'));

    const steer = events.find((event) => event.type === 'user.message' && event.data.steer === true);
    expect(steer).toMatchObject({ step: 2, data: { text: 'also check the tests' } });
    const types = events.map((event) => event.type);
    expect(events.indexOf(steer!)).toBeGreaterThan(types.indexOf('tool.result'));
    const last = requests.at(-1)?.messages.map((message) => `${message.role}:${message.content}`);
    expect(last?.slice(-2)).toEqual(['tool:released', 'user:also check the tests']);
    expect(events.find((event) => event.type === 'turn.ended')).toMatchObject({ data: { reason: 'yielded', text: 'steered answer' } });
    spy.unsubscribe();
    watcher.stop();
  });

  it('of an idle session is refused', async () => {
    const reply = await requestJson(stack.client, 'agentbus.default.sessions.steer-1.steer', 'hello?');
    expect(reply).toMatchObject({ ok: false, error: { code: 'not_found' } });
  });
});
