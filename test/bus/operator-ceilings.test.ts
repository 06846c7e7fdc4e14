import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { connect } from '@nats-io/transport-node';
import type { AgentEvent } from '../../src/protocol/index.ts';
import { startRuntimeService } from '../../services/runtime/index.ts';
import { withinCeilings } from '../../services/runtime/ingress/prompt-ceilings.ts';
import { collectEvents, requestJson, silentLogger, startStack } from '../helpers/stack.ts';
import type { TestStack } from '../helpers/stack.ts';

const userMessages = (events: AgentEvent[]) => events.flatMap((event) => (event.type === 'user.message' ? [event.data] : []));
const ended = (events: AgentEvent[]) => events.some((event) => event.type === 'turn.ended');

describe('a prompt under the operator ceilings', () => {
  it('is refused above the steps ceiling, taken at it, and given the cost ceiling when it names no cost', () => {
    expect(() => withinCeilings({ text: 'hi', maxSteps: 100 }, { maxSteps: 32 })).toThrow(/maxSteps 100 is above this deployment's ceiling of 32 steps \(AGENTBUS_MAX_STEPS_CEILING\)/);
    expect(withinCeilings({ text: 'hi', maxSteps: 32 }, { maxSteps: 32 })).toEqual({ text: 'hi', maxSteps: 32 });
    expect(withinCeilings({ text: 'hi' }, { maxSteps: 32 })).toEqual({ text: 'hi' });
    expect(withinCeilings({ text: 'hi' }, { maxSteps: 32, maxCost: 0.5 })).toEqual({ text: 'hi', maxCost: 0.5 });
    expect(withinCeilings({ text: 'hi', maxCost: 0.5 }, { maxSteps: 32, maxCost: 0.5 })).toEqual({ text: 'hi', maxCost: 0.5 });
    expect(() => withinCeilings({ text: 'hi', maxCost: 0.51 }, { maxSteps: 32, maxCost: 0.5 })).toThrow(/maxCost 0.51 is above this deployment's cost ceiling of 0.5 USD \(AGENTBUS_MAX_COST_CEILING\)/);
  });
});

describe('operator ceilings on a running runtime', () => {
  let stack: TestStack;
  beforeAll(async () => {
    stack = await startStack({ script: { responses: [{ text: 'done' }] }, runtime: { ceilings: { maxSteps: 32, maxCost: 0.5 } } });
  });
  afterAll(() => stack?.stop());

  it('refuses a prompt asking for 100 steps with an error naming the ceiling, and logs nothing for it', async () => {
    const watcher = collectEvents(stack.client, 'acme', 'steps-100');
    const reply = await requestJson(stack.client, 'agentbus.acme.sessions.steps-100.prompt', { text: 'go', maxSteps: 100 });
    expect(reply).toMatchObject({ accepted: false, error: { code: 'invalid_input', retryable: false } });
    expect(reply.error?.message).toMatch(/ceiling of 32 steps \(AGENTBUS_MAX_STEPS_CEILING\)/);
    // The same session takes a prompt at the ceiling: the refusal harmed nothing.
    expect(await requestJson(stack.client, 'agentbus.acme.sessions.steps-100.prompt', { text: 'go', maxSteps: 32 })).toMatchObject({ accepted: true });
    const events = await watcher.until(ended);
    expect(userMessages(events)).toEqual([expect.objectContaining({ text: 'go', maxSteps: 32 })]);
    watcher.stop();
  });

  it('runs a prompt without maxCost under the cost ceiling, and refuses one above it', async () => {
    const watcher = collectEvents(stack.client, 'acme', 'cost-1');
    const refused = await requestJson(stack.client, 'agentbus.acme.sessions.cost-1.prompt', { text: 'dear', maxCost: 2 });
    expect(refused).toMatchObject({ accepted: false, error: { code: 'invalid_input' } });
    expect(refused.error?.message).toMatch(/cost ceiling of 0.5 USD \(AGENTBUS_MAX_COST_CEILING\)/);
    expect(await requestJson(stack.client, 'agentbus.acme.sessions.cost-1.prompt', { text: 'plain' })).toMatchObject({ accepted: true });
    await watcher.until(ended);
    expect(await requestJson(stack.client, 'agentbus.acme.sessions.cost-1.prompt', { text: 'cheap', maxCost: 0.25 })).toMatchObject({ accepted: true });
    const events = await watcher.until((seen) => seen.filter((event) => event.type === 'turn.ended').length >= 2);
    // The limit a turn ran under is in its user.message: the ceiling when the prompt named none.
    expect(userMessages(events)).toEqual([expect.objectContaining({ text: 'plain', maxCost: 0.5 }), expect.objectContaining({ text: 'cheap', maxCost: 0.25 })]);
    watcher.stop();
  });

  it('lowers the built-in default maxSteps to a lower ceiling: a prompt without maxSteps runs under it', async () => {
    const look = { toolCalls: [{ name: 'list_dir', args: { path: '.' } }] };
    const low = await startStack({ script: { responses: [look, look, look, { text: 'done at last' }] }, runtime: { ceilings: { maxSteps: 2 } } });
    try {
      const watcher = collectEvents(low.client, 'acme', 'low-1');
      expect(await requestJson(low.client, 'agentbus.acme.sessions.low-1.prompt', { text: 'loop' })).toMatchObject({ accepted: true });
      const events = await watcher.until(ended, 20_000);
      // The script asks for a tool at every step: the turn runs out of its 2 steps.
      expect(events.find((event) => event.type === 'turn.ended')).toMatchObject({ data: { reason: 'budget_exceeded', steps: 2 } });
      watcher.stop();
    } finally {
      await low.stop();
    }
  });

  it('refuses to start a runtime whose default maxSteps is above the steps ceiling', async () => {
    const nc = await connect({ servers: stack.server.url });
    try {
      await expect(startRuntimeService({ nc, logger: silentLogger(), config: { maxSteps: 40 } })).rejects.toThrow(/default maxSteps \(AGENTBUS_MAX_STEPS, 40\) is above the steps ceiling \(AGENTBUS_MAX_STEPS_CEILING, 32\)/);
    } finally {
      await nc.close();
    }
  });
});
