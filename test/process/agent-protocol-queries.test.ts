import { mkdtemp, rm, writeFile } from 'node:fs/promises';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { connect } from '@nats-io/transport-node';
import type { NatsConnection, Subscription } from '@nats-io/nats-core';
import { contentTypeOf, createCodec } from '../../src/protocol/index.ts';
import { startNatsServer } from '../helpers/nats-server.ts';
import type { TestNatsServer } from '../helpers/nats-server.ts';
import { startServiceProcess } from '../helpers/service-process.ts';
import type { ServiceProcess } from '../helpers/service-process.ts';
import { chunkOf, isTerminator, promptStream } from '../helpers/agent-protocol-caller.ts';
import type { StreamMessage } from '../helpers/agent-protocol-caller.ts';

// The Synadia Agent Protocol host's §7 queries and §5.2 attachments, black-box: a real nats-server, the runtime, the
// scripted provider, the tools service (its privileged `run_command`, under bubblewrap) and the agents service as
// processes; the caller speaks plain NATS and answers queries as §7.2 says (one message on `reply_subject`).

const MARKER = 'ran-after-the-callers-yes';
const SCRIPT = {
  responses: [
    // Every session's first call asks for a privileged command, so an approval is awaited; then it answers.
    { toolCalls: [{ name: 'run_command', args: { command: ['echo', MARKER] } }] },
    { text: 'Done with the command.' },
  ],
};
const QUERY_TIMEOUT_MS = 4_000;
const AGENTS = {
  heartbeatIntervalS: 5,
  queryTimeoutMs: QUERY_TIMEOUT_MS,
  agents: [
    { owner: 'acme', name: 'ops', tenant: 'acme', model: 'scripted:default', approvals: 'caller' },
    { owner: 'acme', name: 'plain', tenant: 'acme', model: 'scripted:default', attachments: false, approvals: 'caller' },
  ],
};
const OPS = 'agents.prompt.agentbus.acme.ops';
const PLAIN = 'agents.prompt.agentbus.acme.plain';

interface Logged {
  type: string;
  sessionId: string;
  data: Record<string, unknown>;
}

let server: TestNatsServer;
let caller: NatsConnection;
let dir: string;
let log: Subscription;
const logged: Logged[] = [];
const processes: ServiceProcess[] = [];
const codec = createCodec();

/** Answers every `query` chunk of the stream on `subject` with `answer(prompt)` (none when it returns undefined). */
function answering(answer: (prompt: string) => string | undefined): { queries: Array<{ id: string; reply_subject: string; prompt: string }>; stop(): void } {
  const queries: Array<{ id: string; reply_subject: string; prompt: string }> = [];
  const inboxes = caller.subscribe('_INBOX.agents.>', {
    callback: (_error, message) => {
      if (message.data.length === 0) return;
      const chunk = JSON.parse(new TextDecoder().decode(message.data)) as { type: string; data: { id: string; reply_subject: string; prompt: string } };
      if (chunk.type !== 'query') return;
      queries.push(chunk.data);
      const reply = answer(chunk.data.prompt);
      if (reply !== undefined) caller.publish(chunk.data.reply_subject, reply);
    },
  });
  return { queries, stop: () => inboxes.unsubscribe() };
}

const sessionOf = (text: string) => logged.find((event) => event.type === 'user.message' && event.data['text'] === text)?.sessionId;
const eventsOf = (sessionId: string | undefined, type: string) => logged.filter((event) => event.sessionId === sessionId && event.type === type);
const responseText = (messages: StreamMessage[]) =>
  messages.filter((message) => !isTerminator(message) && message.headers['Nats-Service-Error-Code'] === undefined).map(chunkOf).filter((chunk) => chunk.type === 'response').map((chunk) => chunk.data).join('');

beforeAll(async () => {
  server = await startNatsServer();
  dir = await mkdtemp(join(tmpdir(), 'agentbus-agent-queries-'));
  const script = join(dir, 'script.json');
  await writeFile(script, JSON.stringify(SCRIPT));
  const agentsFile = join(dir, 'agents.json');
  await writeFile(agentsFile, JSON.stringify(AGENTS));
  const runtime = startServiceProcess('services/runtime/main.ts', { NATS_URL: server.url, AGENTBUS_MODEL: 'scripted:default' });
  const provider = startServiceProcess('services/provider/main.ts', { NATS_URL: server.url, AGENTBUS_SCRIPT: script });
  const tools = startServiceProcess('services/tools/main.ts', { NATS_URL: server.url, AGENTBUS_WORKSPACE: dir });
  const agents = startServiceProcess('services/agents/main.ts', { NATS_URL: server.url, AGENTBUS_AGENTS: agentsFile });
  processes.push(runtime, provider, tools, agents);
  await Promise.all([
    runtime.waitFor('runtime started', 60_000),
    provider.waitFor('provider service started', 60_000),
    tools.waitFor('tools service started', 60_000),
    agents.waitFor('agents service started', 60_000),
  ]);
  caller = await connect({ servers: server.url, inboxPrefix: '_INBOX.agents' });
  log = caller.subscribe('agentbus.acme.sessions.*.log', {
    callback: (_error, message) => {
      const event = codec.decode(message.data, contentTypeOf(message)) as Logged;
      logged.push(event);
    },
  });
  await caller.flush();
}, 90_000);

afterAll(async () => {
  log?.unsubscribe();
  await caller?.close();
  await Promise.all(processes.map((process) => process.stop('SIGTERM')));
  await server?.stop();
  if (dir) await rm(dir, { recursive: true, force: true });
});

describe('approvals asked of the caller as §7 queries', () => {
  it('asks the caller with a query chunk after the ack, and a "yes" on its reply subject approves the call, which runs', async () => {
    const caller7 = answering(() => 'yes');
    const messages = await promptStream(caller, OPS, 'Run the command, please.', { timeoutMs: 30_000 });
    caller7.stop();
    expect(messages[0]!.text).toBe('{"type":"status","data":"ack"}');
    const chunks = messages.filter((message) => !isTerminator(message)).map(chunkOf);
    const queries = chunks.filter((chunk) => chunk.type === 'query') as Array<{ data: { id: string; reply_subject: string; prompt: string } }>;
    expect(queries).toHaveLength(1);
    expect(queries[0]!.data).toEqual({ id: expect.stringMatching(/^[0-9a-f-]{36}$/), reply_subject: expect.stringMatching(/^_INBOX_agents\.query\.\w+$/), prompt: expect.stringContaining('run_command') });
    expect(queries[0]!.data.prompt).toContain(MARKER);
    expect(responseText(messages)).toBe('Done with the command.');
    expect(isTerminator(messages.at(-1)!)).toBe(true);
    expect(messages.filter((message) => message.headers['Nats-Service-Error-Code'] !== undefined)).toEqual([]);
    // The decision is the caller's, logged as any approval is, and the command ran.
    const session = sessionOf('Run the command, please.');
    await expect.poll(() => eventsOf(session, 'tool.result').length, { timeout: 5_000 }).toBe(1);
    expect(eventsOf(session, 'approval.decided')[0]?.data).toMatchObject({ approved: true, reason: 'approved by the caller of the agent protocol' });
    expect(JSON.stringify(eventsOf(session, 'tool.result')[0]?.data)).toContain(MARKER);
  }, 60_000);

  it('denies the call with the caller\'s words as the reason when the reply is anything else (the envelope form too)', async () => {
    const caller7 = answering(() => JSON.stringify({ prompt: 'not on a Friday' }));
    const messages = await promptStream(caller, OPS, 'Run it on Friday.', { timeoutMs: 30_000 });
    caller7.stop();
    expect(responseText(messages)).toBe('Done with the command.');
    const session = sessionOf('Run it on Friday.');
    await expect.poll(() => eventsOf(session, 'tool.result').length, { timeout: 5_000 }).toBe(1);
    expect(eventsOf(session, 'approval.decided')[0]?.data).toMatchObject({ approved: false, reason: 'the caller answered: not on a Friday' });
    expect(JSON.stringify(eventsOf(session, 'tool.result')[0]?.data)).not.toContain(MARKER);
  }, 60_000);

  it('denies the call when the caller does not answer within queryTimeoutMs, and the turn still answers', async () => {
    const caller7 = answering(() => undefined);
    const began = Date.now();
    const messages = await promptStream(caller, OPS, 'Nobody will answer.', { timeoutMs: 30_000 });
    caller7.stop();
    expect(caller7.queries).toHaveLength(1);
    expect(Date.now() - began).toBeGreaterThanOrEqual(QUERY_TIMEOUT_MS);
    expect(responseText(messages)).toBe('Done with the command.');
    const session = sessionOf('Nobody will answer.');
    expect(eventsOf(session, 'approval.decided')[0]?.data).toMatchObject({ approved: false, reason: `the caller did not answer within ${QUERY_TIMEOUT_MS / 1000} s` });
  }, 60_000);
});

describe('attachments (§5.2)', () => {
  it('announces attachments_ok "true" and passes UTF-8 attachments to the model as text files of the prompt', async () => {
    const [info] = await (async () => {
      const answers: Array<{ endpoints: Array<{ subject: string; metadata: Record<string, string> }> }> = [];
      for await (const message of await caller.requestMany('$SRV.INFO.agents', '', { strategy: 'timer', maxWait: 1500 })) answers.push(JSON.parse(new TextDecoder().decode(message.data)));
      return answers.filter((answer) => answer.endpoints[0]!.subject === OPS);
    })();
    expect(info!.endpoints[0]!.metadata['attachments_ok']).toBe('true');
    const body = JSON.stringify({
      prompt: 'Summarise the notes.',
      attachments: [{ filename: 'notes.md', content: Buffer.from('# Plan\nShip on Tuesday — naïve ✓').toString('base64') }],
    });
    const caller7 = answering(() => 'no');
    const messages = await promptStream(caller, OPS, body, { timeoutMs: 30_000 });
    caller7.stop();
    expect(isTerminator(messages.at(-1)!)).toBe(true);
    // The runtime logs a prompt's text files in its user message, each in a <file> block, as for `agentbus ask --file`.
    const userMessage = logged.find((event) => event.type === 'user.message' && String(event.data['text']).startsWith('Summarise the notes.'));
    expect(userMessage?.data['text']).toContain('<file name="notes.md">\n# Plan\nShip on Tuesday — naïve ✓\n</file>');
  }, 60_000);

  it('refuses with 400 and no ack an attachment that is not UTF-8 text, and any attachment where attachments_ok is "false"', async () => {
    const binary = JSON.stringify({ prompt: 'Look at this.', attachments: [{ filename: 'logo.png', content: Buffer.from([0x89, 0x50, 0x4e, 0x47, 0xff, 0xd8]).toString('base64') }] });
    const refused = await promptStream(caller, OPS, binary, { settleMs: 100 });
    expect(refused.map((message) => message.headers['Nats-Service-Error-Code'] ?? (isTerminator(message) ? 'end' : message.text))).toEqual(['400', 'end']);
    expect(JSON.parse(refused[0]!.text)).toMatchObject({ error: 'bad_request', message: expect.stringMatching(/logo\.png.*not UTF-8 text/) });
    const text = JSON.stringify({ prompt: 'Read.', attachments: [{ filename: 'a.txt', content: Buffer.from('hello').toString('base64') }] });
    const plain = await promptStream(caller, PLAIN, text, { settleMs: 100 });
    expect(plain.map((message) => message.headers['Nats-Service-Error-Code'] ?? (isTerminator(message) ? 'end' : message.text))).toEqual(['400', 'end']);
  });
});
