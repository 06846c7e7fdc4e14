import { mkdtemp, rm, writeFile } from 'node:fs/promises';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { lastAssistantMessageIsCompleteWithApprovalResponses } from 'ai';
import type { UIMessage } from 'ai';
import { startNatsServer } from '../helpers/nats-server.ts';
import type { TestNatsServer } from '../helpers/nats-server.ts';
import { TestChat, startChatStack } from '../helpers/chat-stack.ts';
import type { ChatStack } from '../helpers/chat-stack.ts';

// Tool approvals through the chat gateway, driven by the AI SDK's own chat logic (AbstractChat, what `useChat`
// wraps) with `sendAutomaticallyWhen: lastAssistantMessageIsCompleteWithApprovalResponses`, as the AI SDK's docs
// wire approvals: the model asks for `run_command` (privileged), the stream ends at the approval request, the user
// answers with `addToolApprovalResponse`, and the chat sends the answer by itself and streams the turn on. A real
// nats-server; the runtime, the scripted provider, the tools service (run_command in bubblewrap), memory and the
// gateway as processes.

const SCRIPT = {
  responses: [
    { text: 'I will run it.', toolCalls: [{ name: 'run_command', args: { command: ['echo', 'approved-run'] } }] },
    { text: 'Done with the command.' },
  ],
};
const TOKEN = 'chat-approvals-test-token-0123456789';

let server: TestNatsServer;
let dir: string;
let stack: ChatStack;

const newChat = (id: string) => new TestChat(stack.base, TOKEN, id, { sendAutomaticallyWhen: lastAssistantMessageIsCompleteWithApprovalResponses });

type ToolPart = Extract<UIMessage['parts'][number], { type: 'dynamic-tool' }>;
const toolPart = (chat: TestChat): ToolPart | undefined =>
  chat.memory.messages.at(-1)?.parts.find((part): part is ToolPart => part.type === 'dynamic-tool');
const textOf = (message: UIMessage | undefined) => (message?.parts ?? []).map((part) => (part.type === 'text' ? part.text : '')).join('');

beforeAll(async () => {
  server = await startNatsServer();
  dir = await mkdtemp(join(tmpdir(), 'agentbus-chat-approvals-'));
  const script = join(dir, 'script.json');
  await writeFile(script, JSON.stringify(SCRIPT));
  stack = await startChatStack({
    env: () => ({ NATS_URL: server.url }),
    services: { runtime: { AGENTBUS_MODEL: 'scripted:default' }, provider: { AGENTBUS_SCRIPT: script }, tools: { AGENTBUS_WORKSPACE: dir }, memory: {} },
    token: TOKEN,
    tenant: 'web',
  });
}, 90_000);

afterAll(async () => {
  await stack?.stop();
  await server?.stop();
  if (dir) await rm(dir, { recursive: true, force: true });
});

describe('tool approvals from a useChat front end', () => {
  it('ends the stream at the approval request; the approval sent by the chat itself runs the command and streams the answer on', async () => {
    const chat = newChat('approve-me');
    await chat.sendMessage({ text: 'Please run echo.' });
    expect(chat.error?.message ?? chat.status).toBe('ready');
    expect(chat.memory.messages.at(-1)?.metadata).toEqual({ reason: 'awaiting_approval' });
    const asked = toolPart(chat);
    expect(asked).toMatchObject({ toolName: 'run_command', state: 'approval-requested', input: { command: ['echo', 'approved-run'] } });
    expect(textOf(chat.memory.messages.at(-1))).toBe('I will run it.');

    await chat.addToolApprovalResponse({ id: asked!.toolCallId, approved: true });
    await expect.poll(() => toolPart(chat)?.state, { timeout: 30_000 }).toBe('output-available');
    await expect.poll(() => chat.status, { timeout: 30_000 }).toBe('ready');
    // The call's one part went from approval-responded to its output: not a second part for the same call.
    const parts = chat.memory.messages.at(-1)!.parts.filter((part) => part.type === 'dynamic-tool');
    expect(parts).toHaveLength(1);
    expect(JSON.stringify(parts[0]!.output)).toContain('approved-run');
    // One assistant message, continued: the first stream's text, the command's output, then the final answer.
    expect(chat.memory.messages.map((message) => message.role)).toEqual(['user', 'assistant']);
    expect(textOf(chat.memory.messages.at(-1))).toBe('I will run it.Done with the command.');
    expect(chat.memory.messages.at(-1)?.metadata).toMatchObject({ reason: 'yielded' });
    expect(chat.error).toBeUndefined();
  }, 90_000);

  it('a denial answers the model with the reason and the command never runs', async () => {
    const chat = newChat('deny-me');
    await chat.sendMessage({ text: 'Please run echo.' });
    const asked = toolPart(chat);
    expect(asked?.state).toBe('approval-requested');
    await chat.addToolApprovalResponse({ id: asked!.toolCallId, approved: false, reason: 'not today' });
    await expect.poll(() => toolPart(chat)?.state, { timeout: 30_000 }).toBe('output-denied');
    await expect.poll(() => chat.memory.messages.at(-1)?.metadata, { timeout: 30_000 }).toMatchObject({ reason: 'yielded' });
    expect(textOf(chat.memory.messages.at(-1))).toBe('I will run it.Done with the command.');
  }, 90_000);

  it('a page reloaded while the turn waits gets the approval request again, and the stream ends there', async () => {
    const chat = newChat('reload-me');
    await chat.sendMessage({ text: 'Please run echo.' });
    expect(toolPart(chat)?.state).toBe('approval-requested');
    // A new page: no messages, resuming the chat's stream.
    const reloaded = newChat('reload-me');
    await reloaded.resumeStream();
    await expect.poll(() => reloaded.status, { timeout: 30_000 }).toBe('ready');
    const asked = toolPart(reloaded);
    expect(asked?.state).toBe('approval-requested');
    await reloaded.addToolApprovalResponse({ id: asked!.toolCallId, approved: true });
    await expect.poll(() => toolPart(reloaded)?.state, { timeout: 30_000 }).toBe('output-available');
    await expect.poll(() => reloaded.memory.messages.at(-1)?.metadata, { timeout: 30_000 }).toMatchObject({ reason: 'yielded' });
  }, 90_000);
});
