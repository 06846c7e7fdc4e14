import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { createAgentbusClient } from '../../src/client/index.ts';
import type { AgentEvent } from '../../src/protocol/index.ts';
import { createScriptedAdapter } from '../../services/provider/index.ts';
import type { ProviderAdapter } from '../../services/provider/index.ts';
import { createGateTool } from '../helpers/gate-tool.ts';
import { collectEvents, requestJson, startStack } from '../helpers/stack.ts';
import type { TestStack } from '../helpers/stack.ts';

const ended = (events: AgentEvent[]) => events.some((event) => event.type === 'turn.ended');
const ofType = <T extends AgentEvent['type']>(events: AgentEvent[], type: T) => events.filter((event): event is Extract<AgentEvent, { type: T }> => event.type === type);

async function runTurn(stack: TestStack, sessionId: string, prompt: Record<string, unknown>, timeoutMs = 15_000): Promise<AgentEvent[]> {
  const watcher = collectEvents(stack.client, 'default', sessionId);
  try {
    const reply = await requestJson(stack.client, `agentbus.default.sessions.${sessionId}.prompt`, prompt);
    expect(reply).toMatchObject({ accepted: true });
    return await watcher.until(ended, timeoutMs);
  } finally {
    watcher.stop();
  }
}

describe('deadlines and the last answer', () => {
  const gate = createGateTool('hold');
  let stack: TestStack;

  beforeAll(async () => {
    stack = await startStack({
      script: {
        responses: [
          { text: 'Reading first.', toolCalls: [{ name: 'read_file', args: { path: 'README.md' } }] },
          // A session with steps left runs `hold`, which waits until cancelled; at maxSteps 1 this is the last answer.
          { text: 'From what I read: the workspace says hello.', toolCalls: [{ name: 'hold', args: {} }] },
        ],
      },
      extraTools: [gate.tool],
    });
  });

  afterAll(async () => {
    gate.open();
    await stack?.stop();
  });

  it('ends a turn past its deadlineMs with deadline_exceeded, cancelling the tool call in flight (its worker sees the cancel)', async () => {
    const startedAt = Date.now();
    const events = await runTurn(stack, 'deadline-1', { text: 'read, then hold', deadlineMs: 1500 });

    const end = ofType(events, 'turn.ended')[0]!;
    expect(end.data).toMatchObject({ reason: 'deadline_exceeded', error: { code: 'deadline_exceeded' } });
    expect(Date.now() - startedAt).toBeLessThan(6000);
    await expect.poll(() => gate.aborted(), { timeout: 5000 }).toBe(1);
    const held = ofType(events, 'tool.result').find((event) => event.data.name === 'hold');
    expect(held?.data).toMatchObject({ isError: true });
    // The worker holds the same deadline (see below), so its own timeout may answer the call before the runtime's
    // cancel does: either way the call ended, with an error, at the turn's deadline.
    expect(['deadline_exceeded', 'cancelled', 'timeout']).toContain(held?.data.error?.code);
    // Its deadline was logged first, as the prompt's acceptance plus deadlineMs.
    const started = ofType(events, 'turn.started')[0]!;
    const prompt = ofType(events, 'user.message')[0]!;
    expect(started.data.deadline).toBeGreaterThanOrEqual(prompt.ts + 1500 - 100);
    expect(started.data.deadline).toBeLessThanOrEqual(prompt.ts + 1500);
    // The tool call's own deadline (its tool allows 60 s) was cut to the turn's: the worker stops it by then even
    // when no cancel reaches it.
    expect(gate.deadlines).toHaveLength(1);
    expect(gate.deadlines[0]).toBeLessThanOrEqual(started.data.deadline!);
  });

  it('answers once more without tools when maxSteps runs out, and still ends budget_exceeded, with that text', async () => {
    const events = await runTurn(stack, 'last-answer-1', { text: 'read it', maxSteps: 1 });

    const end = ofType(events, 'turn.ended')[0]!;
    expect(end.data).toMatchObject({ reason: 'budget_exceeded', text: 'From what I read: the workspace says hello.', steps: 1 });
    const messages = ofType(events, 'assistant.message');
    expect(messages.map((event) => [event.step, event.data.toolCalls.length, event.data.finalAnswer ?? false])).toEqual([
      [1, 1, false],
      [1, 0, true],
    ]);
    // The call the last answer asked for anyway was never made.
    expect(ofType(events, 'tool.use').map((event) => event.data.name)).toEqual(['read_file']);
    for (const message of messages) {
      expect(message.data.model).toBe('scripted:default');
      expect(message.data.latencyMs).toBeGreaterThanOrEqual(0);
      expect(message.data.firstTokenMs).toBeGreaterThanOrEqual(0);
      expect(message.data.firstTokenMs!).toBeLessThanOrEqual(message.data.latencyMs!);
    }
  });

  it('skips the last answer with finalAnswer: false', async () => {
    const events = await runTurn(stack, 'last-answer-2', { text: 'read it', maxSteps: 1, finalAnswer: false });

    expect(ofType(events, 'turn.ended')[0]!.data).toMatchObject({ reason: 'budget_exceeded', text: 'Reading first.' });
    expect(ofType(events, 'assistant.message')).toHaveLength(1);
  });

  it('logs turn.started first in each turn, with its model, budgets and deadline', async () => {
    const events = await runTurn(stack, 'started-1', { text: 'read it', maxSteps: 1, maxCost: 2, deadlineMs: 60_000 });

    const logged = events.filter((event) => event.type !== 'state' && event.type !== 'progress' && event.type !== 'assistant.delta' && event.type !== 'retry');
    const turnId = ofType(events, 'user.message')[0]!.turnId;
    const ofTurn = logged.filter((event) => event.turnId === turnId).map((event) => event.type);
    expect(ofTurn.slice(0, 2)).toEqual(['user.message', 'turn.started']);
    expect(ofType(events, 'turn.started')[0]!.data).toMatchObject({ model: 'scripted:default', maxSteps: 1, maxCost: 2, finalAnswer: true });
  });

  it("cancels the running turn when the SDK's ask gives up on it, and sends its timeout as the turn's deadline", async () => {
    const client = createAgentbusClient({ nc: stack.client });
    const target = { tenant: 'default', sessionId: 'ask-gives-up-1' };
    const watcher = collectEvents(stack.client, target.tenant, target.sessionId);
    const abortedBefore = gate.aborted();
    // The prompt's own deadline is far: only the client's cancel can end the turn this soon.
    await expect(client.ask(target, { text: 'read, then hold', deadlineMs: 60_000 }, { timeoutMs: 1500 })).rejects.toMatchObject({ code: 'timeout' });
    const events = await watcher.until(ended, 5000);
    watcher.stop();
    expect(ofType(events, 'turn.ended')[0]!.data.reason).toBe('cancelled');
    await expect.poll(() => gate.aborted(), { timeout: 5000 }).toBe(abortedBefore + 1);

    const timed = collectEvents(stack.client, target.tenant, 'ask-gives-up-2');
    await expect(client.ask({ ...target, sessionId: 'ask-gives-up-2' }, { text: 'read, then hold' }, { timeoutMs: 1500 })).rejects.toBeDefined();
    const seen = await timed.until(ended, 5000);
    timed.stop();
    expect(ofType(seen, 'user.message')[0]!.data.deadlineMs).toBe(1500);
  });

  it('refuses a deadlineMs past the ceiling with a clear error', async () => {
    const reply = await requestJson(stack.client, 'agentbus.default.sessions.deadline-bad.prompt', { text: 'hi', deadlineMs: 25 * 60 * 60_000 });
    expect(reply.accepted).toBe(false);
    expect(reply.error?.message).toContain('deadlineMs');
  });
});

/** The scripted provider, with a price: a summary call costs 0.5, any other 0.01; summaries of `summary-fails-*` fail. */
function pricedAdapter(): ProviderAdapter {
  const scripted = createScriptedAdapter({
    script: { responses: [{ toolCalls: [{ name: 'list_dir', args: { path: '.' } }] }, { text: 'done' }] },
  });
  return {
    name: scripted.name,
    async *generate(request, options) {
      const summary = request.messages[0]?.content.startsWith('Summarize the conversation below') ?? false;
      if (summary && request.sessionId?.startsWith('summary-fails')) {
        yield { type: 'error', error: { code: 'provider_error', message: 'the summary model is down', retryable: false } };
        return;
      }
      if (summary) {
        yield { type: 'text-delta', text: 'They listed the folder.' };
        yield { type: 'usage', usage: { inputTokens: 100, outputTokens: 7 } };
        yield { type: 'done', finishReason: 'stop', model: request.model, cost: 0.5 };
        return;
      }
      for await (const chunk of scripted.generate(request, options)) yield chunk.type === 'done' ? { ...chunk, cost: 0.01 } : chunk;
    },
  };
}

describe('summary calls counted', () => {
  let stack: TestStack;

  beforeAll(async () => {
    // No room for history (the answer's reserve is over the window): the second step compacts.
    stack = await startStack({ runtime: { maxOutputTokens: 40_000 }, script: { responses: [] }, adapters: [pricedAdapter()] });
  });

  afterAll(async () => {
    await stack?.stop();
  });

  it('counts the summary call in turn.ended usage and cost', async () => {
    const events = await runTurn(stack, 'summary-cost-1', { text: 'list the folder' });

    const summary = ofType(events, 'summary.created')[0]!;
    expect(summary.data).toMatchObject({ cost: 0.5, usage: { inputTokens: 100, outputTokens: 7 }, model: 'scripted:default' });
    const end = ofType(events, 'turn.ended')[0]!;
    expect(end.data.reason).toBe('yielded');
    expect(end.data.cost).toBeCloseTo(0.52, 9);
    const steps = ofType(events, 'assistant.message').reduce((sum, event) => sum + event.data.usage.inputTokens, 0);
    expect(end.data.usage.inputTokens).toBe(steps + 100);
  });

  it('counts it in maxCost too: a summary that passes maxCost ends the turn budget_exceeded', async () => {
    const events = await runTurn(stack, 'summary-cost-2', { text: 'list the folder', maxCost: 0.2 });

    expect(ofType(events, 'turn.ended')[0]!.data).toMatchObject({ reason: 'budget_exceeded', cost: 0.51 });
    expect(ofType(events, 'assistant.message')).toHaveLength(1);
  });

  it('logs summary.failed when the summary call fails, and the turn goes on', async () => {
    const events = await runTurn(stack, 'summary-fails-1', { text: 'list the folder' });

    const failed = ofType(events, 'summary.failed')[0];
    expect(failed?.data).toMatchObject({ model: 'scripted:default', error: { code: 'provider_error', message: 'the summary model is down' } });
    expect(ofType(events, 'turn.ended')[0]!.data).toMatchObject({ reason: 'yielded', text: 'done' });
  });
});
