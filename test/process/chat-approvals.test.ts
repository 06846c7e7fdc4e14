import { mkdtemp, rm, writeFile } from 'node:fs/promises';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { AbstractChat, DefaultChatTransport, lastAssistantMessageIsCompleteWithApprovalResponses } from 'ai';
import type { ChatState, ChatStatus, UIMessage } from 'ai';
import { startNatsServer } from '../helpers/nats-server.ts';
import type { TestNatsServer } from '../helpers/nats-server.ts';
import { startServiceProcess } from '../helpers/service-process.ts';
import type { ServiceProcess } from '../helpers/service-process.ts';

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
let base: string;
const processes: ServiceProcess[] = [];

/** The plain state `useChat` keeps in React, kept here in fields. */
class MemoryChatState implements ChatState<UIMessage> {
  status: ChatStatus = 'ready';
  error: Error | undefined = undefined;
  messages: UIMessage[] = [];
  pushMessage = (message: UIMessage) => {
    this.messages = [...this.messages, message];
  };
  popMessage = () => {
    this.messages = this.messages.slice(0, -1);
  };
  replaceMessage = (index: number, message: UIMessage) => {
    this.messages = this.messages.map((current, at) => (at === index ? message : current));
  };
  snapshot = <T,>(thing: T): T => structuredClone(thing);
}

class TestChat extends AbstractChat<UIMessage> {
  readonly memory: MemoryChatState;
  constructor(id: string) {
    const state = new MemoryChatState();
    super({
      id,
      state,
      transport: new DefaultChatTransport<UIMessage>({ api: `${base}/api/chat`, headers: { Authorization: `Bearer ${TOKEN}` } }),
      sendAutomaticallyWhen: lastAssistantMessageIsCompleteWithApprovalResponses,
    });
    this.memory = state;
  }
}

type ToolPart = Extract<UIMessage['parts'][number], { type: 'dynamic-tool' }>;
const toolPart = (chat: TestChat): ToolPart | undefined =>
  chat.memory.messages.at(-1)?.parts.find((part): part is ToolPart => part.type === 'dynamic-tool');
const textOf = (message: UIMessage | undefined) => (message?.parts ?? []).map((part) => (part.type === 'text' ? part.text : '')).join('');

beforeAll(async () => {
  server = await startNatsServer();
  dir = await mkdtemp(join(tmpdir(), 'agentbus-chat-approvals-'));
  const script = join(dir, 'script.json');
  await writeFile(script, JSON.stringify(SCRIPT));
  const nats = { NATS_URL: server.url };
  processes.push(
    startServiceProcess('services/runtime/main.ts', { ...nats, AGENTBUS_MODEL: 'scripted:default' }),
    startServiceProcess('services/provider/main.ts', { ...nats, AGENTBUS_SCRIPT: script }),
    startServiceProcess('services/tools/main.ts', { ...nats, AGENTBUS_WORKSPACE: dir }),
    startServiceProcess('services/memory/main.ts', { ...nats }),
    startServiceProcess('services/chat/main.ts', { ...nats, AGENTBUS_CHAT_TOKEN: TOKEN, AGENTBUS_CHAT_PORT: '0', AGENTBUS_CHAT_TENANT: 'web' }),
  );
  const [runtime, provider, tools, memory, chat] = processes as [ServiceProcess, ServiceProcess, ServiceProcess, ServiceProcess, ServiceProcess];
  await Promise.all([
    runtime.waitFor('runtime started', 60_000),
    provider.waitFor('provider service started', 60_000),
    tools.waitFor('tools service started', 60_000),
    memory.waitFor('memory service ready', 60_000),
    chat.waitFor('chat gateway started', 60_000),
  ]);
  base = /chat gateway started on (http:\/\/[\d.:]+)/.exec(chat.output())![1]!;
}, 90_000);

afterAll(async () => {
  await Promise.all(processes.map((process) => process.stop('SIGTERM')));
  await server?.stop();
  if (dir) await rm(dir, { recursive: true, force: true });
});

describe('tool approvals from a useChat front end', () => {
  it('ends the stream at the approval request; the approval sent by the chat itself runs the command and streams the answer on', async () => {
    const chat = new TestChat('approve-me');
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
    const chat = new TestChat('deny-me');
    await chat.sendMessage({ text: 'Please run echo.' });
    const asked = toolPart(chat);
    expect(asked?.state).toBe('approval-requested');
    await chat.addToolApprovalResponse({ id: asked!.toolCallId, approved: false, reason: 'not today' });
    await expect.poll(() => toolPart(chat)?.state, { timeout: 30_000 }).toBe('output-denied');
    await expect.poll(() => chat.memory.messages.at(-1)?.metadata, { timeout: 30_000 }).toMatchObject({ reason: 'yielded' });
    expect(textOf(chat.memory.messages.at(-1))).toBe('I will run it.Done with the command.');
  }, 90_000);

  it('a page reloaded while the turn waits gets the approval request again, and the stream ends there', async () => {
    const chat = new TestChat('reload-me');
    await chat.sendMessage({ text: 'Please run echo.' });
    expect(toolPart(chat)?.state).toBe('approval-requested');
    // A new page: no messages, resuming the chat's stream.
    const reloaded = new TestChat('reload-me');
    await reloaded.resumeStream();
    await expect.poll(() => reloaded.status, { timeout: 30_000 }).toBe('ready');
    const asked = toolPart(reloaded);
    expect(asked?.state).toBe('approval-requested');
    await reloaded.addToolApprovalResponse({ id: asked!.toolCallId, approved: true });
    await expect.poll(() => toolPart(reloaded)?.state, { timeout: 30_000 }).toBe('output-available');
    await expect.poll(() => reloaded.memory.messages.at(-1)?.metadata, { timeout: 30_000 }).toMatchObject({ reason: 'yielded' });
  }, 90_000);
});
