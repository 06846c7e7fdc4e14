import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import type { UIMessage } from 'ai';
import { connect } from '@nats-io/transport-node';
import type { NatsConnection } from '@nats-io/nats-core';
import { startProviderService } from '../../services/provider/index.ts';
import { startToolsService } from '../../services/tools/index.ts';
import { startNatsServer } from '../helpers/nats-server.ts';
import type { TestNatsServer } from '../helpers/nats-server.ts';
import { TestChat, startChatStack } from '../helpers/chat-stack.ts';
import type { ChatStack } from '../helpers/chat-stack.ts';
import { silentLogger } from '../helpers/stack.ts';
import { createPickBranchTool } from '../helpers/pick-branch-tool.ts';

// A tool that asks the user, and a typed final answer, through the chat gateway, driven by the AI SDK's own chat
// logic (AbstractChat, what `useChat` wraps): the question arrives as a `data-agentbus-question` part and ends the
// stream; one answer goes to `POST /api/chat/<id>/input`, a reloaded page resumes the turn to the next question, and
// the next answer goes with `sendMessage(undefined, { body: { answers } })`, which streams the turn on to its typed
// `output` in the `finish` metadata. A real nats-server; the runtime, memory and the gateway as processes, the
// scripted provider and a tool worker with the asking tool (the tool SDK's `context.ask`) in this process.

const TOKEN = 'chat-questions-test-token-0123456789';
const OUTPUT_SCHEMA = { type: 'object', properties: { branch: { type: 'string' } }, required: ['branch'], additionalProperties: false };
const SCRIPT = {
  responses: [
    { text: 'Let me ask you.', toolCalls: [{ name: 'pick_branch', args: {} }] },
    { text: '{"branch":"main"}' },
  ],
};

let server: TestNatsServer;
let services: NatsConnection;
let base: string;
const stops: Array<() => Promise<void>> = [];
let stack: ChatStack;
/** `pick_branch` and the answers of each of its runs. */
const { tool: pickBranch, runs } = createPickBranchTool();

const newChat = (id: string) => new TestChat(base, TOKEN, id);

type Part = UIMessage['parts'][number];
const last = (chat: TestChat) => chat.memory.messages.at(-1);
const partsOf = (chat: TestChat, type: string) => (last(chat)?.parts ?? []).filter((part: Part) => part.type === type) as Array<Part & { id?: string; data?: Record<string, unknown> }>;
const postInput = (chatId: string, body: unknown) =>
  fetch(`${base}/api/chat/${chatId}/input`, { method: 'POST', headers: { Authorization: `Bearer ${TOKEN}`, 'Content-Type': 'application/json' }, body: JSON.stringify(body) });

beforeAll(async () => {
  server = await startNatsServer();
  services = await connect({ servers: server.url });
  const provider = await startProviderService({ nc: services, logger: silentLogger(), script: SCRIPT });
  const tools = await startToolsService({ nc: services, logger: silentLogger(), extraTools: [pickBranch] });
  stops.push(() => tools.stop(), () => provider.stop());
  stack = await startChatStack({ env: () => ({ NATS_URL: server.url }), services: { runtime: { AGENTBUS_MODEL: 'scripted:default' }, memory: {} }, token: TOKEN, tenant: 'web' });
  base = stack.base;
}, 90_000);

afterAll(async () => {
  await stack?.stop();
  for (const stop of stops) await stop().catch(() => undefined);
  await services?.close();
  await server?.stop();
});

describe('tools\' questions and typed output from a useChat front end', () => {
  it('shows a question and ends the stream there; takes answers at /input and with the message; streams on to the typed output', async () => {
    const chat = newChat('ask-me');
    await chat.sendMessage({ text: 'Release, please.' }, { body: { outputSchema: OUTPUT_SCHEMA } });
    expect(chat.error?.message ?? chat.status).toBe('ready');
    expect(last(chat)?.metadata).toEqual({ reason: 'awaiting_input' });
    const [question] = partsOf(chat, 'data-agentbus-question');
    const toolCallId = (last(chat)?.parts.find((part) => part.type === 'dynamic-tool') as { toolCallId: string } | undefined)?.toolCallId;
    expect(toolCallId).toBeDefined();
    expect(question).toEqual({
      type: 'data-agentbus-question',
      id: `${toolCallId}:1`,
      data: { toolCallId, requestId: `${toolCallId}:1`, question: 'Which branch should I release?', schema: { type: 'string', enum: ['main', 'next'] } },
    });

    // The endpoint: an answer the question's schema refuses is a 400 (the question stays open), a good one is taken.
    const refused = await postInput('ask-me', { toolCallId, answer: 'develop' });
    expect(refused.status).toBe(400);
    expect(await refused.json()).toMatchObject({ ok: false, error: { code: 'invalid_input' } });
    expect((await postInput('ask-me', { toolCallId })).status).toBe(400);
    const taken = await postInput('ask-me', { toolCallId, requestId: `${toolCallId}:1`, answer: 'main' });
    expect(taken.status).toBe(200);
    expect(await taken.json()).toMatchObject({ ok: true });

    // A reloaded page resumes the turn from its start: the first question and its answer, then the next question.
    const reloaded = newChat('ask-me');
    await reloaded.resumeStream();
    await expect.poll(() => reloaded.status, { timeout: 30_000 }).toBe('ready');
    expect(partsOf(reloaded, 'data-agentbus-question').map((part) => [part.id, part.data?.['question']])).toEqual([
      [`${toolCallId}:1`, 'Which branch should I release?'],
      [`${toolCallId}:2`, 'Any release notes?'],
    ]);
    expect(partsOf(reloaded, 'data-agentbus-answer').map((part) => part.data)).toEqual([{ toolCallId, requestId: `${toolCallId}:1`, answer: 'main' }]);
    expect(last(reloaded)?.metadata).toEqual({ reason: 'awaiting_input' });

    // The next answer with the message (no new user message): the turn streams on in the same message.
    await reloaded.sendMessage(undefined, { body: { answers: [{ toolCallId, requestId: `${toolCallId}:2`, answer: 'first cut' }] } });
    await expect.poll(() => reloaded.status, { timeout: 30_000 }).toBe('ready');
    expect(reloaded.error).toBeUndefined();
    expect(reloaded.memory.messages.map((message) => message.role)).toEqual(['assistant']);
    const tools = last(reloaded)!.parts.filter((part) => part.type === 'dynamic-tool');
    expect(tools).toHaveLength(1);
    expect(tools[0]).toMatchObject({ state: 'output-available', output: 'released main with notes: first cut' });
    expect(partsOf(reloaded, 'data-agentbus-answer').map((part) => part.data?.['answer'])).toEqual(['main', 'first cut']);
    expect(last(reloaded)?.metadata).toMatchObject({ reason: 'yielded', output: { branch: 'main' } });
    expect(runs.at(-1)).toEqual(['main', 'first cut']);

    // Nothing awaits now: an answer with the message is refused before any stream.
    const late = newChat('ask-me');
    late.memory.messages = [{ id: 'a', role: 'assistant', parts: [] }];
    await late.sendMessage(undefined, { body: { answers: [{ toolCallId, answer: 'again' }] } });
    expect(late.error?.message).toMatch(/no turn of this chat awaits/);
    const closed = await postInput('ask-me', { toolCallId, answer: 'again' });
    expect(closed.status).toBe(404);
  }, 120_000);
});
