import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { createCodec } from '../../src/protocol/index.ts';
import type { AgentEvent, GenerateRequest } from '../../src/protocol/index.ts';
import { createGateTool } from '../helpers/gate-tool.ts';
import { collectEvents, requestJson, startStack } from '../helpers/stack.ts';
import type { TestStack } from '../helpers/stack.ts';

const codec = createCodec();
const gate = createGateTool('hold');
const isSummaryRequest = (request: GenerateRequest) => request.messages[0]?.content.startsWith('Summarize the conversation below') ?? false;
const ended = (events: AgentEvent[]) => events.flatMap((event) => (event.type === 'turn.ended' ? [event] : []));

let stack: TestStack;

beforeAll(async () => {
  stack = await startStack({
    // No room for history at all (the answer's reserve is over the window): every step with more than two
    // messages in view compacts, cutting all but the newest message.
    runtime: { maxOutputTokens: 40_000 },
    script: {
      responses: [
        { toolCalls: [{ name: 'hold', args: {} }] },
        { text: 'summary one' },
        { toolCalls: [{ name: 'list_dir', args: { path: '.' } }] },
        { text: 'summary two' },
        { text: 'first done' },
        // Then the script runs out, and the provider echoes the request's last user message.
      ],
    },
    extraTools: [gate.tool],
  });
});

afterAll(async () => {
  gate.open();
  await stack?.stop();
});

describe('compaction while a prompt is queued', () => {
  it('summarizes only the running turn, and the queued prompt reaches the model after it', async () => {
    const requests: GenerateRequest[] = [];
    const spy = stack.client.subscribe('agentbus.provider.scripted.generate', {
      callback: (_error, message) => {
        requests.push(codec.decode(message.data, message.headers?.get('Content-Type')) as GenerateRequest);
      },
    });
    const watcher = collectEvents(stack.client, 'default', 'queued-compact-1');
    const first = await requestJson(stack.client, 'agentbus.default.sessions.queued-compact-1.prompt', { text: 'first' });
    await expect.poll(() => gate.effects.length, { timeout: 10_000 }).toBe(1);
    // Logged while the first turn waits on its tool: before both of that turn's compactions cut.
    const second = await requestJson(stack.client, 'agentbus.default.sessions.queued-compact-1.prompt', { text: 'second' });
    expect(second).toMatchObject({ accepted: true });
    gate.open();
    const events = await watcher.until((seen) => ended(seen).length >= 2, 15_000);

    const turns = ended(events);
    expect(turns.map((event) => [event.turnId, event.data.reason, event.data.text])).toEqual([
      [first.turnId, 'yielded', 'first done'],
      [second.turnId, 'yielded', 'second'],
    ]);
    const summaries = events.flatMap((event) => (event.type === 'summary.created' ? [event] : []));
    expect(summaries.map((event) => event.turnId)).toEqual([first.turnId, first.turnId, second.turnId]);
    // What the first turn summarized is its own conversation, never the prompt that waited; what the second
    // summarized is the first turn's end, cut before its own prompt (logged earlier than that end though it is).
    const summarized = requests.filter(isSummaryRequest).map((request) => [request.turnId, request.messages[1]?.content]);
    expect(summarized.map(([turnId]) => turnId)).toEqual([first.turnId, first.turnId, second.turnId]);
    for (const [, text] of summarized) expect(text).not.toContain('user: second');
    expect(summarized[2]?.[1]).toContain('assistant: first done');
    // The queued turn's last call ends with its prompt, after the first turn's answer.
    const last = requests.at(-1)!;
    expect(last.turnId).toBe(second.turnId);
    expect(last.messages.at(-1)).toEqual({ role: 'user', content: 'second' });
    spy.unsubscribe();
    watcher.stop();
  });
});
