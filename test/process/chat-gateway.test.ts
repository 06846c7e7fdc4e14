import { mkdtemp, rm, writeFile } from 'node:fs/promises';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { DefaultChatTransport, readUIMessageStream } from 'ai';
import type { UIMessage, UIMessageChunk } from 'ai';
import { startNatsServer } from '../helpers/nats-server.ts';
import type { TestNatsServer } from '../helpers/nats-server.ts';
import { startChatStack } from '../helpers/chat-stack.ts';
import type { ChatStack } from '../helpers/chat-stack.ts';

// The chat gateway, black-box, driven by the AI SDK's own client side (ai 6): DefaultChatTransport (what `useChat`
// sends and reconnects with) and readUIMessageStream (how `useChat` builds its messages from the stream). A real
// nats-server; the runtime, the scripted provider, the tools service (its `current_time`), memory (it serves the
// history a resume reads) and the gateway as processes.

const SLOW = 'The answer streams slowly, one small piece at a time, so that a reader can leave and come back to it.';
const SCRIPT = {
  responses: [
    { text: 'Let me look at the clock.', toolCalls: [{ name: 'current_time', args: {} }] },
    { text: SLOW, chunkSize: 6, delayMs: 120 },
  ],
};
const TOKEN = 'chat-gateway-test-token-0123456789';

let server: TestNatsServer;
let dir: string;
let base: string;
let stack: ChatStack;

const transport = (token = TOKEN) => new DefaultChatTransport<UIMessage>({ api: `${base}/api/chat`, headers: { Authorization: `Bearer ${token}` } });
const userMessage = (text: string): UIMessage => ({ id: `m-${Math.random().toString(36).slice(2)}`, role: 'user', parts: [{ type: 'text', text }] });
const send = (chatId: string, text: string, abortSignal?: AbortSignal) =>
  transport().sendMessages({ trigger: 'submit-message', chatId, messageId: undefined, messages: [userMessage(text)], abortSignal });

/** The message `useChat` would show once the stream ends. */
async function lastMessage(stream: ReadableStream<UIMessageChunk>): Promise<UIMessage | undefined> {
  let last: UIMessage | undefined;
  for await (const message of readUIMessageStream({ stream })) last = message;
  return last;
}
const textOf = (message: UIMessage | undefined) => (message?.parts ?? []).map((part) => (part.type === 'text' ? part.text : '')).join('');

/** The raw SSE events of a response: each `id:` and `data:` pair. */
async function sseEvents(response: Response, until?: (events: Array<{ id?: string; data: string }>) => boolean): Promise<Array<{ id?: string; data: string }>> {
  const events: Array<{ id?: string; data: string }> = [];
  const reader = response.body!.pipeThrough(new TextDecoderStream()).getReader();
  let buffer = '';
  for (;;) {
    const { value, done } = await reader.read();
    if (done) break;
    buffer += value;
    let end: number;
    while ((end = buffer.indexOf('\n\n')) >= 0) {
      const block = buffer.slice(0, end);
      buffer = buffer.slice(end + 2);
      const id = /^id: (.*)$/m.exec(block)?.[1];
      const data = /^data: (.*)$/m.exec(block)?.[1];
      if (data !== undefined) events.push({ ...(id ? { id } : {}), data });
    }
    if (until?.(events)) {
      await reader.cancel();
      break;
    }
  }
  return events;
}

beforeAll(async () => {
  server = await startNatsServer();
  dir = await mkdtemp(join(tmpdir(), 'agentbus-chat-'));
  const script = join(dir, 'script.json');
  await writeFile(script, JSON.stringify(SCRIPT));
  stack = await startChatStack({
    env: () => ({ NATS_URL: server.url }),
    services: { runtime: { AGENTBUS_MODEL: 'scripted:default' }, provider: { AGENTBUS_SCRIPT: script }, tools: { AGENTBUS_WORKSPACE: dir }, memory: {} },
    token: TOKEN,
    tenant: 'web',
  });
  base = stack.base;
}, 90_000);

afterAll(async () => {
  await stack?.stop();
  await server?.stop();
  if (dir) await rm(dir, { recursive: true, force: true });
});

describe('a turn as the AI SDK UI message stream', () => {
  it('answers a useChat message: the tool call as a dynamic tool part with its output, the text, and the turn as metadata', async () => {
    const message = await lastMessage(await send('chat-one', 'What time is it?'));
    expect(message?.role).toBe('assistant');
    expect(message?.id).toMatch(/\S/);
    const tool = message!.parts.find((part) => part.type === 'dynamic-tool');
    expect(tool).toMatchObject({ type: 'dynamic-tool', toolName: 'current_time', state: 'output-available' });
    expect(JSON.stringify((tool as { output: unknown }).output)).toMatch(/\d{4}-\d{2}-\d{2}/);
    expect(textOf(message)).toBe(`Let me look at the clock.${SLOW}`);
    expect(message!.parts.filter((part) => part.type === 'step-start')).toHaveLength(2);
    expect(message!.metadata).toMatchObject({ reason: 'yielded', steps: 2 });
  }, 30_000);

  it('survives a reload: the client leaves mid-answer, the turn runs on, and reconnectToStream streams the whole turn; then 204', async () => {
    const leaving = new AbortController();
    const stream = await send('chat-reload', 'Tell me slowly.', leaving.signal);
    const reader = stream.getReader();
    // Read until the slow answer has begun, then leave as a reload does.
    for (;;) {
      const { value } = await reader.read();
      if (value?.type === 'text-delta' && value.id === 'text-2') break;
    }
    leaving.abort();
    await reader.cancel().catch(() => undefined);
    const resumed = await transport().reconnectToStream({ chatId: 'chat-reload' });
    expect(resumed).not.toBeNull();
    const message = await lastMessage(resumed!);
    expect(textOf(message)).toBe(`Let me look at the clock.${SLOW}`);
    expect(message?.metadata).toMatchObject({ reason: 'yielded' });
    // Nothing runs now: no stream to resume.
    expect(await transport().reconnectToStream({ chatId: 'chat-reload' })).toBeNull();
  }, 30_000);

  it('resumes from Last-Event-ID with exactly the rest of the stream, even after the turn ended', async () => {
    const first = await fetch(`${base}/api/chat`, {
      method: 'POST',
      headers: { Authorization: `Bearer ${TOKEN}`, 'Content-Type': 'application/json' },
      body: JSON.stringify({ id: 'chat-resume', trigger: 'submit-message', messages: [userMessage('Once more, slowly.')] }),
    });
    expect(first.headers.get('x-vercel-ai-ui-message-stream')).toBe('v1');
    const before = await sseEvents(first, (events) => events.filter((event) => event.data.includes('"text-2"')).length >= 3);
    const lastId = before.at(-1)!.id!;
    expect(lastId).toMatch(/^\d+-\d+$/);
    // Wait for the turn to end, so the rest comes from the log and the live stream's retained deltas.
    await expect.poll(async () => (await fetch(`${base}/api/chat/chat-resume/stream`, { headers: { Authorization: `Bearer ${TOKEN}` } })).status, { timeout: 15_000 }).toBe(204);
    const rest = await sseEvents(await fetch(`${base}/api/chat/chat-resume/stream`, { headers: { Authorization: `Bearer ${TOKEN}`, 'Last-Event-ID': lastId } }));
    expect(rest.at(-1)!.data).toBe('[DONE]');
    const chunks = [...before, ...rest].filter((event) => event.data !== '[DONE]').map((event) => JSON.parse(event.data) as UIMessageChunk);
    const text = chunks.map((chunk) => (chunk.type === 'text-delta' ? chunk.delta : '')).join('');
    expect(text).toBe(`Let me look at the clock.${SLOW}`);
    expect(chunks.filter((chunk) => chunk.type === 'start')).toHaveLength(1);
    expect(chunks.at(-1)).toMatchObject({ type: 'finish', finishReason: 'stop' });
    // The ids only grow.
    const ids = [...before, ...rest].filter((event) => event.id).map((event) => event.id!.split('-').map(Number));
    for (let index = 1; index < ids.length; index += 1) {
      expect(ids[index]![0]! >= ids[index - 1]![0]! && ids[index]![1]! >= ids[index - 1]![1]!).toBe(true);
    }
  }, 30_000);

  it('cancels the running turn on POST /api/chat/<id>/cancel: the stream ends with abort, finish and [DONE]', async () => {
    const response = await fetch(`${base}/api/chat`, {
      method: 'POST',
      headers: { Authorization: `Bearer ${TOKEN}`, 'Content-Type': 'application/json' },
      body: JSON.stringify({ id: 'chat-cancel', messages: [userMessage('Go on and on.')] }),
    });
    let cancelled: Promise<Response> | undefined;
    const events = await sseEvents(response, (seen) => {
      // Once the slow answer (step 2's text) streams.
      cancelled ??= seen.some((event) => event.data.includes('"text-2"')) ? fetch(`${base}/api/chat/chat-cancel/cancel`, { method: 'POST', headers: { Authorization: `Bearer ${TOKEN}` } }) : undefined;
      return false;
    });
    const reply = await cancelled!;
    expect(reply.status, await reply.clone().text()).toBe(200);
    const types = events.map((event) => (event.data === '[DONE]' ? '[DONE]' : (JSON.parse(event.data) as UIMessageChunk).type));
    expect(types.slice(-3)).toEqual(['abort', 'finish', '[DONE]']);
  }, 30_000);
});

describe('what the gateway refuses', () => {
  it('refuses a missing or wrong token (401), a bad body (400), an unknown path (404) and a wrong method (405)', async () => {
    await expect(send('chat-x', 'hi').catch((error: Error) => error.message)).resolves.toBeDefined();
    await expect(transport('wrong-token-wrong-token').sendMessages({ trigger: 'submit-message', chatId: 'chat-x', messageId: undefined, messages: [userMessage('hi')], abortSignal: undefined })).rejects.toThrow();
    const post = (body: unknown, token = TOKEN) => fetch(`${base}/api/chat`, { method: 'POST', headers: { Authorization: `Bearer ${token}` }, body: typeof body === 'string' ? body : JSON.stringify(body) });
    expect((await post({ id: 'a', messages: [] }, 'nope')).status).toBe(401);
    const bad: Array<[unknown, RegExp]> = [
      ['{not json', /not JSON/],
      [{ id: 'has space', messages: [userMessage('x')] }, /chat id/],
      [{ id: 'a', messages: [] }, /at least/],
      [{ id: 'a', messages: [userMessage('   ')] }, /no text/],
      [{ id: 'a', messages: [{ id: 'f', role: 'user', parts: [{ type: 'file', url: 'data:text/plain,hi', mediaType: 'text/plain' }] }] }, /"file" is not supported/],
      [{ id: 'a', trigger: 'regenerate-message', messages: [userMessage('x')] }, /regenerate/],
    ];
    for (const [body, message] of bad) {
      const reply = await post(body);
      expect(reply.status).toBe(400);
      expect(((await reply.json()) as { error: { message: string } }).error.message).toMatch(message);
    }
    expect((await fetch(`${base}/api/nothing`, { headers: { Authorization: `Bearer ${TOKEN}` } })).status).toBe(404);
    expect((await fetch(`${base}/api/chat`, { headers: { Authorization: `Bearer ${TOKEN}` } })).status).toBe(405);
    // A Host that is not loopback (DNS rebinding) is refused before anything else.
    const { request } = await import('node:http');
    const status = await new Promise<number>((resolve, reject) => {
      const url = new URL(`${base}/api/chat/a/stream`);
      request({ host: url.hostname, port: url.port, path: url.pathname, headers: { Host: 'evil.example:80', Authorization: `Bearer ${TOKEN}` } }, (reply) => {
        reply.resume();
        resolve(reply.statusCode ?? 0);
      }).on('error', reject).end();
    });
    expect(status).toBe(403);
  }, 30_000);
});
