import { mkdtemp, rm, writeFile } from 'node:fs/promises';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { randomUUID } from 'node:crypto';
import { request as httpRequest } from 'node:http';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { connect } from '@nats-io/transport-node';
import type { NatsConnection, Subscription } from '@nats-io/nats-core';
import { Role, TaskState } from '@a2a-js/sdk';
import type { AgentCard, Message, StreamResponse, Task, TaskArtifactUpdateEvent } from '@a2a-js/sdk';
import { ClientFactory } from '@a2a-js/sdk/client';
import type { Client } from '@a2a-js/sdk/client';
import { z } from 'zod';
import { createAgentbusClient } from '../../src/client/index.ts';
import { createCodec } from '../../src/protocol/index.ts';
import { defineTool } from '../../src/tool-sdk/index.ts';
import { startToolsService } from '../../services/tools/index.ts';
import { silentLogger } from '../helpers/stack.ts';
import { startNatsServer } from '../helpers/nats-server.ts';
import type { TestNatsServer } from '../helpers/nats-server.ts';
import { startServiceProcess } from '../helpers/service-process.ts';
import type { ServiceProcess } from '../helpers/service-process.ts';

// The A2A server against real processes: a nats-server, the runtime, the scripted provider, memory (which reads the
// log back) and services/a2a as a process, driven by the A2A SDK's own client (ClientFactory), as any A2A caller is; a
// privileged tool (`deploy`) is served from this process for the interrupt test.

const FIRST = 'Hello from agentbus over A2A, streamed chunk by chunk.';
const SECOND = 'Yes, I remember what you said before.';
const SLOW = 'This answer takes its time: one character a second, long enough to be cancelled.';
const SCRIPT = {
  // Each session plays the script from its start: a new context gets FIRST, its second turn SECOND, its third SLOW.
  responses: [{ text: FIRST, chunkSize: 8, delayMs: 30 }, { text: SECOND }, { text: SLOW, chunkSize: 1, delayMs: 1000 }],
  // Turns prompted on the bus with these models: a typed answer, and a call that needs an approval.
  models: {
    typed: [{ text: '{"files":3}' }],
    asker: [{ text: 'Deploying.', toolCalls: [{ name: 'deploy', args: {} }] }, { text: 'Deployed.' }],
  },
};
const TOKEN = 'a2a-test-token-0123456789';

let server: TestNatsServer;
let dir: string;
let watcher: NatsConnection;
let services: NatsConnection;
let tools: { stop(): Promise<void> } | undefined;
let generates: Subscription;
const requests: unknown[] = [];
const processes: ServiceProcess[] = [];
let a2a: ServiceProcess;
let baseUrl: string;
let client: Client;
const codec = createCodec();

/** The A2A service as a process on a free port; resolves with its URL once it serves. */
async function startA2a(env: Record<string, string> = {}): Promise<{ process: ServiceProcess; url: string }> {
  const started = startServiceProcess('services/a2a/main.ts', { NATS_URL: server.url, AGENTBUS_A2A_PORT: '0', AGENTBUS_A2A_TENANT: 'acme', AGENTBUS_A2A_MODEL: 'scripted:default', ...env });
  processes.push(started);
  await started.waitFor('A2A server started on', 60_000);
  const url = /A2A server started on (http:\/\/[^\s"]+)/.exec(started.output())![1]!;
  return { process: started, url };
}

function userMessage(text: string, contextId?: string): Message {
  return {
    messageId: randomUUID(),
    contextId: contextId ?? '',
    taskId: '',
    role: Role.ROLE_USER,
    parts: [{ content: { $case: 'text', value: text }, metadata: undefined, filename: '', mediaType: 'text/plain' }],
    metadata: undefined,
    extensions: [],
    referenceTaskIds: [],
  };
}

const send = (message: Message, returnImmediately = false) =>
  ({ tenant: '', message, configuration: { acceptedOutputModes: ['text/plain'], taskPushNotificationConfig: undefined, returnImmediately }, metadata: undefined });

function textOf(parts: ReadonlyArray<{ content?: { $case: string; value?: unknown } | undefined }> | undefined): string {
  return (parts ?? []).map((part) => (part.content?.$case === 'text' ? String(part.content.value) : '')).join('');
}

function asTask(result: unknown): Task {
  expect(result).toMatchObject({ id: expect.any(String), contextId: expect.any(String) });
  return result as Task;
}

beforeAll(async () => {
  server = await startNatsServer();
  dir = await mkdtemp(join(tmpdir(), 'agentbus-a2a-'));
  const script = join(dir, 'script.json');
  await writeFile(script, JSON.stringify(SCRIPT));
  const runtime = startServiceProcess('services/runtime/main.ts', { NATS_URL: server.url, AGENTBUS_MODEL: 'scripted:default' });
  const provider = startServiceProcess('services/provider/main.ts', { NATS_URL: server.url, AGENTBUS_SCRIPT: script });
  const memory = startServiceProcess('services/memory/main.ts', { NATS_URL: server.url, AGENTBUS_EMBED_PROVIDER: 'scripted' });
  processes.push(runtime, provider, memory);
  await Promise.all([runtime.waitFor('runtime started', 60_000), provider.waitFor('provider service started', 60_000), memory.waitFor('memory caught up with the log', 60_000)]);
  // What the model is sent, heard beside the provider (which serves in a queue group).
  watcher = await connect({ servers: server.url });
  generates = watcher.subscribe('agentbus.provider.scripted.generate', { callback: (_error, message) => void requests.push(codec.decode(message.data, message.headers?.get('Content-Type'))) });
  // A privileged tool for the interrupt test, served from the start so that the runtime's tool discovery has it.
  services = await connect({ servers: server.url });
  const deploy = defineTool({ name: 'deploy', description: 'deploys', parameters: z.object({}), tier: 'privileged', timeoutMs: 10_000, idempotent: false, execute: () => 'deployed' });
  tools = await startToolsService({ nc: services, logger: silentLogger(), extraTools: [deploy] });
  ({ process: a2a, url: baseUrl } = await startA2a());
  client = await new ClientFactory().createFromUrl(baseUrl);
}, 120_000);

afterAll(async () => {
  await tools?.stop();
  await services?.close();
  generates?.unsubscribe();
  await watcher?.close();
  await Promise.all(processes.map((process) => process.stop('SIGTERM')));
  await server?.stop();
  if (dir) await rm(dir, { recursive: true, force: true });
});

describe('the agent card', () => {
  it('is served at /.well-known/agent-card.json: JSON-RPC for A2A 1.0 and 0.3, streaming, no push, text in and out, no security by default', async () => {
    const card: AgentCard = await client.getAgentCard();
    expect(card.name).toBe('agentbus');
    expect(card.supportedInterfaces.map((intf) => [intf.protocolBinding, intf.protocolVersion, intf.url])).toEqual([
      ['JSONRPC', '1.0', `${baseUrl}/a2a/jsonrpc`],
      ['JSONRPC', '0.3', `${baseUrl}/a2a/jsonrpc`],
    ]);
    expect(card.capabilities).toMatchObject({ streaming: true, pushNotifications: false });
    expect(card.defaultOutputModes).toEqual(['text/plain', 'application/json']);
    expect(card.skills.length).toBeGreaterThan(0);
    expect(card.securityRequirements ?? []).toEqual([]);
    expect(card.securitySchemes ?? {}).toEqual({});
    // The same card over plain HTTP, as curl gets it (no A2A-Version: the v0.3 shape, with its `url`).
    const legacy = (await (await fetch(`${baseUrl}/.well-known/agent-card.json`)).json()) as Record<string, unknown>;
    expect(legacy).toMatchObject({ name: 'agentbus', url: `${baseUrl}/a2a/jsonrpc`, protocolVersion: '0.3', capabilities: { streaming: true } });
  });
});

describe('tasks are turns, contexts are sessions', () => {
  let first: Task;

  it('SendMessage (blocking) runs a turn and returns the completed task with the answer as artifact and status message', async () => {
    const result = await client.sendMessage(send(userMessage('Hello, agent.')));
    first = asTask(result);
    expect(first.status?.state).toBe(TaskState.TASK_STATE_COMPLETED);
    expect(textOf(first.artifacts[0]?.parts)).toBe(FIRST);
    expect(textOf(first.status?.message?.parts)).toBe(FIRST);
    expect(first.status?.message?.role).toBe(Role.ROLE_AGENT);
    // The task id names the session (the context) and the turn.
    expect(first.id.startsWith(`${first.contextId}.`)).toBe(true);
    expect(first.history.map((message) => [message.role, textOf(message.parts)])).toEqual([
      [Role.ROLE_USER, 'Hello, agent.'],
      [Role.ROLE_AGENT, FIRST],
    ]);
  });

  it('SendStreamingMessage opens with the task, streams status updates and the answer in chunks, and ends with the final text', async () => {
    const events: StreamResponse['payload'][] = [];
    for await (const event of client.sendMessageStream(send(userMessage('Stream it, please.')))) events.push(event.payload);
    const kinds = events.map((payload) => payload?.$case);
    expect(kinds[0]).toBe('task');
    const task = events[0]!.value as Task;
    expect([TaskState.TASK_STATE_SUBMITTED, TaskState.TASK_STATE_WORKING]).toContain(task.status?.state);
    const statuses = events.filter((payload) => payload?.$case === 'statusUpdate').map((payload) => (payload!.value as { status: { state: TaskState } }).status.state);
    expect(statuses.at(-1)).toBe(TaskState.TASK_STATE_COMPLETED);
    expect(statuses).toContain(TaskState.TASK_STATE_WORKING);
    const chunks = events.filter((payload) => payload?.$case === 'artifactUpdate').map((payload) => payload!.value as TaskArtifactUpdateEvent);
    // Several deltas, then the whole answer as the last chunk.
    expect(chunks.filter((chunk) => !chunk.lastChunk).length).toBeGreaterThan(1);
    expect(chunks.filter((chunk) => !chunk.lastChunk).map((chunk) => textOf(chunk.artifact?.parts)).join('')).toBe(FIRST);
    expect(chunks.at(-1)).toMatchObject({ lastChunk: true, append: false });
    expect(textOf(chunks.at(-1)!.artifact?.parts)).toBe(FIRST);
    const final = events.at(-1)!.value as { status: { message: Message } };
    expect(textOf(final.status.message.parts)).toBe(FIRST);
  });

  it('GetTask reads the task back from the session log, and ListTasks finds it (newest first, by context too)', async () => {
    const got = await client.getTask({ tenant: '', id: first.id, historyLength: undefined });
    expect(got).toMatchObject({ id: first.id, contextId: first.contextId, status: { state: TaskState.TASK_STATE_COMPLETED } });
    expect(textOf(got.artifacts[0]?.parts)).toBe(FIRST);
    const shortHistory = await client.getTask({ tenant: '', id: first.id, historyLength: 1 });
    expect(shortHistory.history.map((message) => message.role)).toEqual([Role.ROLE_AGENT]);
    // The tenant's sessions come from memory's index, which follows the log: polled.
    const listAll = () => client.listTasks({ tenant: '', contextId: '', status: TaskState.TASK_STATE_UNSPECIFIED, pageToken: '', statusTimestampAfter: undefined });
    await expect.poll(async () => (await listAll()).tasks.map((task) => task.id), { timeout: 10_000 }).toContain(first.id);
    const listed = await listAll();
    const times = listed.tasks.map((task) => Date.parse(task.status!.timestamp!));
    expect(times).toEqual([...times].sort((a, b) => b - a));
    expect(listed.nextPageToken).toBe('');
    const byContext = await client.listTasks({ tenant: '', contextId: first.contextId, status: TaskState.TASK_STATE_COMPLETED, pageToken: '', statusTimestampAfter: undefined, includeArtifacts: true });
    expect(byContext.tasks.map((task) => task.id)).toEqual([first.id]);
    expect(textOf(byContext.tasks[0]!.artifacts[0]?.parts)).toBe(FIRST);
    // Paged one at a time, the pages join up to the whole list.
    const page1 = await client.listTasks({ tenant: '', contextId: '', status: TaskState.TASK_STATE_UNSPECIFIED, pageToken: '', pageSize: 1, statusTimestampAfter: undefined });
    expect(page1.tasks).toHaveLength(1);
    expect(page1.nextPageToken).not.toBe('');
    const page2 = await client.listTasks({ tenant: '', contextId: '', status: TaskState.TASK_STATE_UNSPECIFIED, pageToken: page1.nextPageToken, pageSize: 1, statusTimestampAfter: undefined });
    expect([...page1.tasks, ...page2.tasks].map((task) => task.id)).toEqual(listed.tasks.slice(0, 2).map((task) => task.id));
  });

  it('a second message with the same contextId continues the same session: the model sees the first exchange', async () => {
    const before = requests.length;
    const second = asTask(await client.sendMessage(send(userMessage('Do you remember me?', first.contextId))));
    expect(second.contextId).toBe(first.contextId);
    expect(second.id).not.toBe(first.id);
    // The session's second provider call: the script's second answer (a new session would have got the first).
    expect(textOf(second.artifacts[0]?.parts)).toBe(SECOND);
    const sent = JSON.stringify(requests.slice(before));
    expect(sent).toContain('Hello, agent.');
    expect(sent).toContain(FIRST);
    expect(sent).toContain('Do you remember me?');
    const both = await client.listTasks({ tenant: '', contextId: first.contextId, status: TaskState.TASK_STATE_UNSPECIFIED, pageToken: '', statusTimestampAfter: undefined });
    expect(both.tasks.map((task) => task.id)).toEqual([second.id, first.id]);
  });

  it('CancelTask cancels a running turn: the task ends CANCELED, and cancelling it again is refused', async () => {
    // The context's third turn plays the slow answer; returnImmediately hands the task back while it runs.
    const running = asTask(await client.sendMessage(send(userMessage('Take your time.', first.contextId), true)));
    expect([TaskState.TASK_STATE_SUBMITTED, TaskState.TASK_STATE_WORKING]).toContain(running.status?.state);
    await expect.poll(async () => (await client.getTask({ tenant: '', id: running.id, historyLength: undefined })).status?.state, { timeout: 10_000 }).toBe(TaskState.TASK_STATE_WORKING);
    const cancelled = await client.cancelTask({ tenant: '', id: running.id, metadata: undefined });
    expect(cancelled.status?.state).toBe(TaskState.TASK_STATE_CANCELED);
    expect((await client.getTask({ tenant: '', id: running.id, historyLength: undefined })).status?.state).toBe(TaskState.TASK_STATE_CANCELED);
    await expect(client.cancelTask({ tenant: '', id: running.id, metadata: undefined })).rejects.toMatchObject({ name: expect.stringMatching(/TaskNotCancelable/) });
  });

  it('task state survives a restart of the A2A server: a new process reads the same tasks from the logs', async () => {
    await a2a.stop('SIGTERM');
    const restarted = await startA2a();
    const fresh = await new ClientFactory().createFromUrl(restarted.url);
    const got = await fresh.getTask({ tenant: '', id: first.id, historyLength: undefined });
    expect(got).toMatchObject({ id: first.id, status: { state: TaskState.TASK_STATE_COMPLETED } });
    expect(textOf(got.artifacts[0]?.parts)).toBe(FIRST);
    const listed = await fresh.listTasks({ tenant: '', contextId: first.contextId, status: TaskState.TASK_STATE_UNSPECIFIED, pageToken: '', statusTimestampAfter: undefined });
    expect(listed.tasks.map((task) => task.status?.state)).toEqual([TaskState.TASK_STATE_CANCELED, TaskState.TASK_STATE_COMPLETED, TaskState.TASK_STATE_COMPLETED]);
    a2a = restarted.process;
    baseUrl = restarted.url;
    client = fresh;
  });
});

describe('errors', () => {
  it('answers a bad request with a JSON-RPC error: unparseable JSON, an unknown method, a bad context id, an unknown task', async () => {
    const post = async (body: string, headers: Record<string, string> = {}) => {
      const response = await fetch(`${baseUrl}/a2a/jsonrpc`, { method: 'POST', headers: { 'Content-Type': 'application/json', 'A2A-Version': '1.0', ...headers }, body });
      return (await response.json()) as { error?: { code: number; message: string } };
    };
    expect((await post('{"jsonrpc": "2.0", "id": 1, "method":')).error?.code).toBe(-32700);
    expect((await post(JSON.stringify({ jsonrpc: '2.0', id: 2, method: 'NoSuchMethod', params: {} }))).error?.code).toBe(-32601);
    const badContext = await post(JSON.stringify({ jsonrpc: '2.0', id: 3, method: 'SendMessage', params: { message: { messageId: 'm-1', role: 'ROLE_USER', contextId: 'not a session id!', parts: [{ text: 'hi' }] } } }));
    expect(badContext.error?.code).toBe(-32602);
    expect(badContext.error?.message).toMatch(/contextId/);
    // Through the SDK client as well: its typed error.
    await expect(client.getTask({ tenant: '', id: 'no-such.task', historyLength: undefined })).rejects.toMatchObject({ name: expect.stringMatching(/TaskNotFound/) });
    await expect(client.sendMessage(send(userMessage('hi', 'bad context!')))).rejects.toThrow(/contextId/);
  });

  it('refuses a request whose Host is not a loopback name while bound to loopback (no DNS rebinding from a web page)', async () => {
    const { port } = new URL(baseUrl);
    const statusFor = (host: string) =>
      new Promise<number | undefined>((resolve, reject) => {
        const outgoing = httpRequest({ host: '127.0.0.1', port: Number(port), path: '/.well-known/agent-card.json', headers: { Host: host } }, (response) => {
          response.resume();
          resolve(response.statusCode);
        });
        outgoing.on('error', reject);
        outgoing.end();
      });
    expect(await statusFor(`attacker.example:${port}`)).toBe(403);
    expect(await statusFor(`localhost:${port}`)).toBe(200);
  });

  it('serves the v0.3 method names to a client that names no version (message/send, tasks/get, tasks/cancel, message/stream)', async () => {
    const v03 = async (method: string, params: unknown) =>
      (await (await fetch(`${baseUrl}/a2a/jsonrpc`, { method: 'POST', headers: { 'Content-Type': 'application/json' }, body: JSON.stringify({ jsonrpc: '2.0', id: method, method, params }) })).json()) as {
        result?: { kind?: string; id?: string; status?: { state?: string } };
        error?: unknown;
      };
    const sent = await v03('message/send', { message: { kind: 'message', messageId: randomUUID(), role: 'user', parts: [{ kind: 'text', text: 'Hello in v0.3.' }] } });
    expect(sent.error).toBeUndefined();
    expect(sent.result).toMatchObject({ kind: 'task', status: { state: 'completed' } });
    const got = await v03('tasks/get', { id: sent.result!.id });
    expect(got.result).toMatchObject({ id: sent.result!.id, status: { state: 'completed' } });
    // A finished task cannot be cancelled: v0.3's TaskNotCancelable.
    expect((await v03('tasks/cancel', { id: sent.result!.id })).error).toMatchObject({ code: -32002 });
    // message/stream: SSE, each event one JSON-RPC response of the v0.3 shapes, ending with the final status.
    const stream = await fetch(`${baseUrl}/a2a/jsonrpc`, {
      method: 'POST',
      headers: { 'Content-Type': 'application/json', Accept: 'text/event-stream' },
      body: JSON.stringify({ jsonrpc: '2.0', id: 's', method: 'message/stream', params: { message: { kind: 'message', messageId: randomUUID(), role: 'user', parts: [{ kind: 'text', text: 'Stream in v0.3.' }] } } }),
    });
    expect(stream.headers.get('content-type')).toMatch(/^text\/event-stream/);
    const results = (await stream.text())
      .split('\n')
      .filter((line) => line.startsWith('data: '))
      .map((line) => (JSON.parse(line.slice(6)) as { result: { kind: string; status?: { state: string } } }).result);
    expect(results[0]?.kind).toBe('task');
    expect(results.some((result) => result.kind === 'artifact-update')).toBe(true);
    expect(results.at(-1)).toMatchObject({ kind: 'status-update', status: { state: 'completed' } });
  });
});

describe('with AGENTBUS_A2A_TOKEN', () => {
  it('declares the bearer scheme in the card and refuses calls without the token', async () => {
    const secured = await startA2a({ AGENTBUS_A2A_TOKEN: TOKEN });
    try {
      const card = await new ClientFactory().createFromUrl(secured.url).then((created) => created.getAgentCard());
      expect(Object.keys(card.securitySchemes)).toEqual(['bearer']);
      expect(card.securitySchemes['bearer']?.scheme).toMatchObject({ $case: 'httpAuthSecurityScheme', value: { scheme: 'Bearer' } });
      expect(card.securityRequirements).toEqual([{ schemes: { bearer: { list: [] } } }]);
      const call = (headers: Record<string, string>) =>
        fetch(`${secured.url}/a2a/jsonrpc`, { method: 'POST', headers: { 'Content-Type': 'application/json', 'A2A-Version': '1.0', ...headers }, body: JSON.stringify({ jsonrpc: '2.0', id: 1, method: 'GetTask', params: { id: 'none.none' } }) });
      const refused = await call({});
      expect(refused.status).toBe(401);
      expect(refused.headers.get('www-authenticate')).toBe('Bearer');
      expect((await call({ Authorization: 'Bearer wrong-token-000000' })).status).toBe(401);
      const allowed = (await (await call({ Authorization: `Bearer ${TOKEN}` })).json()) as { error?: { code: number } };
      // Past the bearer check: the SDK's transport answers (no such task).
      expect(allowed.error?.code).toBe(-32001);
    } finally {
      await secured.process.stop('SIGTERM');
    }
  });
});

describe('typed output and interrupts of turns prompted on the bus', () => {
  it('shows a typed turn\'s output as a data part of the answer, and a turn awaiting an approval as INPUT_REQUIRED until decided', async () => {
    const bus = createAgentbusClient({ nc: watcher });
    const schema = { type: 'object', properties: { files: { type: 'integer' } }, required: ['files'] };
    const typed = await bus.prompt({ tenant: 'acme', sessionId: 'typed-ctx' }, { text: 'How many files?', model: 'scripted:typed', outputSchema: schema }, { timeoutMs: 15_000 });
    const typedTask = () => client.getTask({ tenant: '', id: `typed-ctx.${typed.turnId}`, historyLength: undefined });
    await expect.poll(async () => (await typedTask()).status?.state, { timeout: 30_000 }).toBe(TaskState.TASK_STATE_COMPLETED);
    expect((await typedTask()).artifacts[0]?.parts.map((part) => part.content)).toEqual([{ $case: 'text', value: '{"files":3}' }, { $case: 'data', value: { files: 3 } }]);

    const target = { tenant: 'acme', sessionId: 'approve-ctx' };
    const asking = await bus.prompt(target, { text: 'Deploy, please.', model: 'scripted:asker' }, { timeoutMs: 15_000 });
    const askingTask = () => client.getTask({ tenant: '', id: `approve-ctx.${asking.turnId}`, historyLength: undefined });
    await expect.poll(async () => (await askingTask()).status?.state, { timeout: 30_000 }).toBe(TaskState.TASK_STATE_INPUT_REQUIRED)
      .catch(async (error: unknown) => {
        // Said with the failure: what the session's log held (a tool unknown to the runtime shows as tool.result without approval.requested).
        const logged = (await bus.history(target, { limit: 100 }, { timeoutMs: 10_000 })).events.map((event) => event.type);
        throw new Error(`the task is not INPUT_REQUIRED; the log holds ${logged.join(', ')}`, { cause: error });
      });
    const waiting = await askingTask();
    expect(textOf(waiting.status?.message?.parts)).toContain('deploy');
    const listed = await client.listTasks({ tenant: '', contextId: 'approve-ctx', status: TaskState.TASK_STATE_INPUT_REQUIRED, pageToken: '', statusTimestampAfter: undefined });
    expect(listed.tasks.map((task) => task.id)).toEqual([waiting.id]);
    // The status message is the approval request's event.
    const requested = (await bus.history(target, { limit: 100 }, { timeoutMs: 10_000 })).events.find((event) => event.type === 'approval.requested');
    expect(waiting.status?.message?.messageId).toBe(requested?.id);
    const { toolCallId } = requested!.data as { toolCallId: string };
    expect(await bus.approve(target, { toolCallId, approved: true }, { timeoutMs: 10_000 })).toMatchObject({ ok: true });
    await expect.poll(async () => (await askingTask()).status?.state, { timeout: 30_000 }).toBe(TaskState.TASK_STATE_COMPLETED);
    expect(textOf((await askingTask()).artifacts[0]?.parts)).toBe('Deployed.');
  }, 120_000);
});
