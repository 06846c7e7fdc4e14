import { mkdtemp, rm, writeFile } from 'node:fs/promises';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { connect } from '@nats-io/transport-node';
import type { NatsConnection } from '@nats-io/nats-core';
import { contentTypeOf, createCodec } from '../../src/protocol/index.ts';
import { startNatsServer } from '../helpers/nats-server.ts';
import type { TestNatsServer } from '../helpers/nats-server.ts';
import { startServiceProcess } from '../helpers/service-process.ts';
import type { ServiceProcess } from '../helpers/service-process.ts';
import { chunkOf, isTerminator, promptStream } from '../helpers/agent-protocol-caller.ts';
import type { StreamMessage } from '../helpers/agent-protocol-caller.ts';

// A black-box test of the agentbus host of the Synadia Agent Protocol 0.3, written from the spec's §12 agent checklist
// (no SDK of the protocol is installable here): a real nats-server, the real runtime, the scripted provider and the
// agents service as processes, and a caller that speaks only plain NATS.

const ANSWER = 'Hello from agentbus, streamed chunk by chunk.';
const SCRIPT = {
  responses: [
    // Spaced chunks, so that the answer streams as several deltas (the provider coalesces what comes at once).
    { text: ANSWER, chunkSize: 6, delayMs: 40 },
    { error: { code: 'provider_error', message: 'the model is down\nfor a while', retryable: false } },
  ],
};
const AGENTS = {
  heartbeatIntervalS: 1,
  agents: [
    // Bound to one session: its first turn answers, its second fails (the script's second response).
    { owner: 'acme', name: 'support', tenant: 'acme', session: 'support-desk', model: 'scripted:default', description: 'acme support' },
    // Bound to none: every prompt is a fresh session, so every prompt gets the script's first answer.
    { agent: 'agentbus', owner: 'acme', name: 'fresh', tenant: 'acme', model: 'scripted:default', maxPayload: '1KB', attachments: false },
  ],
};
const SUPPORT = 'agents.prompt.agentbus.acme.support';
const FRESH = 'agents.prompt.agentbus.acme.fresh';

interface InfoRecord {
  type: string;
  name: string;
  id: string;
  version: string;
  metadata: Record<string, string>;
  endpoints: Array<{ name: string; subject: string; queue_group: string; metadata: Record<string, string> | null }>;
}

let server: TestNatsServer;
let caller: NatsConnection;
let dir: string;
const processes: ServiceProcess[] = [];
let agentsEnv: Record<string, string>;

const codec = createCodec();
const decode = (data: Uint8Array) => JSON.parse(new TextDecoder().decode(data)) as unknown;

async function gather(subject: string, body = '', maxWait = 1500): Promise<unknown[]> {
  const answers: unknown[] = [];
  for await (const message of await caller.requestMany(subject, body, { strategy: 'timer', maxWait })) answers.push(decode(message.data));
  return answers;
}

function expectBadRequest(messages: StreamMessage[]): void {
  // §9, §5.3: an error message with a 400 and a JSON body, then the terminator; no ack for a request never taken.
  expect(messages, JSON.stringify(messages.map((message) => [message.headers, message.text]))).toHaveLength(2);
  const [error, terminator] = messages as [StreamMessage, StreamMessage];
  expect(error.headers['Nats-Service-Error-Code']).toBe('400');
  expect(error.headers['Nats-Service-Error']).toMatch(/\S/);
  expect(JSON.parse(error.text)).toMatchObject({ error: expect.stringMatching(/^[a-z_]+$/), message: expect.any(String) });
  expect(isTerminator(terminator)).toBe(true);
}

beforeAll(async () => {
  server = await startNatsServer();
  dir = await mkdtemp(join(tmpdir(), 'agentbus-agent-protocol-'));
  const script = join(dir, 'script.json');
  await writeFile(script, JSON.stringify(SCRIPT));
  const agentsFile = join(dir, 'agents.json');
  await writeFile(agentsFile, JSON.stringify(AGENTS));
  const runtime = startServiceProcess('services/runtime/main.ts', { NATS_URL: server.url, AGENTBUS_MODEL: 'scripted:default' });
  const provider = startServiceProcess('services/provider/main.ts', { NATS_URL: server.url, AGENTBUS_SCRIPT: script });
  agentsEnv = { NATS_URL: server.url, AGENTBUS_AGENTS: agentsFile };
  const agents = startServiceProcess('services/agents/main.ts', agentsEnv);
  processes.push(runtime, provider, agents);
  // Three processes starting at once on a shared machine: a generous wait.
  await Promise.all([runtime.waitFor('runtime started', 60_000), provider.waitFor('provider service started', 60_000), agents.waitFor('agents service started', 60_000)]);
  caller = await connect({ servers: server.url, inboxPrefix: '_INBOX.agents' });
}, 90_000);

afterAll(async () => {
  await caller?.close();
  await Promise.all(processes.map((process) => process.stop('SIGTERM')));
  await server?.stop();
  if (dir) await rm(dir, { recursive: true, force: true });
});

describe('registration and discovery (§3, §4)', () => {
  it('registers each agent as the micro service `agents` with its metadata, and `prompt` and `status` in queue group `agents`', async () => {
    const infos = (await gather('$SRV.INFO.agents')) as InfoRecord[];
    expect(infos).toHaveLength(2);
    const support = infos.find((info) => info.metadata['agent'] === 'agentbus' && info.endpoints.some((endpoint) => endpoint.subject === SUPPORT))!;
    expect(support).toMatchObject({ type: 'io.nats.micro.v1.info_response', name: 'agents', version: expect.stringMatching(/^\d+\.\d+\.\d+/) });
    expect(support.metadata).toEqual({ agent: 'agentbus', owner: 'acme', protocol_version: '0.3', session: 'support-desk' });
    expect(support.endpoints.map((endpoint) => [endpoint.name, endpoint.subject, endpoint.queue_group])).toEqual([
      ['prompt', SUPPORT, 'agents'],
      ['status', 'agents.status.agentbus.acme.support', 'agents'],
    ]);
    // Endpoint metadata is strings, as NATS micro carries it and the SDKs send it.
    expect(support.endpoints[0]!.metadata).toEqual({ max_payload: expect.stringMatching(/^\d+(B|KB|MB|GB)$/), attachments_ok: 'true' });
    const fresh = infos.find((info) => info.endpoints.some((endpoint) => endpoint.subject === FRESH))!;
    expect(fresh.metadata).toEqual({ agent: 'agentbus', owner: 'acme', protocol_version: '0.3' });
    expect(fresh.endpoints[0]!.metadata).toEqual({ max_payload: '1KB', attachments_ok: 'false' });
    // By instance id too, as callers look an instance up.
    const [byId] = (await gather(`$SRV.INFO.agents.${support.id}`)) as InfoRecord[];
    expect(byId?.id).toBe(support.id);
  });

  it('answers $SRV.PING.agents from every instance', async () => {
    const pings = (await gather('$SRV.PING.agents')) as Array<{ type: string; name: string; id: string }>;
    expect(pings.map((ping) => [ping.type, ping.name])).toEqual([
      ['io.nats.micro.v1.ping_response', 'agents'],
      ['io.nats.micro.v1.ping_response', 'agents'],
    ]);
    expect(new Set(pings.map((ping) => ping.id)).size).toBe(2);
  });
});

describe('heartbeat and status (§8)', () => {
  it('publishes heartbeats on agents.hb.{agent}.{owner}.{name} with every §8.3 field, at its interval', async () => {
    const beats: Array<{ subject: string; body: Record<string, unknown>; at: number }> = [];
    const subscription = caller.subscribe('agents.hb.*.*.*', { callback: (_error, message) => {
        beats.push({ subject: message.subject, body: decode(message.data) as Record<string, unknown>, at: Date.now() });
      } });
    await expect.poll(() => beats.filter((beat) => beat.subject === 'agents.hb.agentbus.acme.support').length, { timeout: 5000 }).toBeGreaterThanOrEqual(2);
    subscription.unsubscribe();
    const support = beats.filter((beat) => beat.subject === 'agents.hb.agentbus.acme.support');
    expect(support[0]!.body).toEqual({ agent: 'agentbus', owner: 'acme', session: 'support-desk', instance_id: expect.any(String), ts: expect.any(String), interval_s: 1 });
    expect(new Date(support[0]!.body['ts'] as string).toISOString()).toBe(support[0]!.body['ts']);
    expect(support[1]!.at - support[0]!.at).toBeGreaterThan(500);
    const fresh = beats.find((beat) => beat.subject === 'agents.hb.agentbus.acme.fresh');
    expect(fresh?.body).not.toHaveProperty('session');
    // The instance id is the micro service id (§3.4).
    const ids = ((await gather('$SRV.PING.agents')) as Array<{ id: string }>).map((ping) => ping.id);
    expect(ids).toContain(support[0]!.body['instance_id']);
  });

  it('answers `status` with the heartbeat payload, whatever the request body', async () => {
    for (const body of ['', 'ignored', '{"anything":1}']) {
      const reply = await caller.request('agents.status.agentbus.acme.support', body, { timeout: 2000 });
      expect(decode(reply.data)).toEqual({ agent: 'agentbus', owner: 'acme', session: 'support-desk', instance_id: expect.any(String), ts: expect.any(String), interval_s: 1 });
    }
  });
});

describe('prompts and the response stream (§5, §6)', () => {
  it('answers a plain-text prompt: one ack first, the answer in response chunks as it streams, then a zero-byte terminator without headers, then nothing', async () => {
    const messages = await promptStream(caller, SUPPORT, 'Say hello.');
    expect(messages[0]!.text).toBe('{"type":"status","data":"ack"}');
    const last = messages.at(-1)!;
    expect(isTerminator(last)).toBe(true);
    // Nothing after the terminator (promptStream waits a while past it), and exactly one terminator.
    expect(messages.filter(isTerminator)).toHaveLength(1);
    const chunks = messages.slice(1, -1).map(chunkOf);
    expect(chunks.every((chunk) => chunk.type === 'response' || (chunk.type === 'status' && chunk.data === 'ack'))).toBe(true);
    const responses = chunks.filter((chunk) => chunk.type === 'response');
    expect(responses.length).toBeGreaterThan(1);
    expect(responses.map((chunk) => chunk.data).join('')).toBe(ANSWER);
    expect(messages.filter((message) => message.headers['Nats-Service-Error-Code'] !== undefined)).toEqual([]);
  });

  it('reports a failed turn with Nats-Service-Error-Code 500 after the ack, then the terminator', async () => {
    // The bound session's second turn meets the script's error.
    const messages = await promptStream(caller, SUPPORT, 'Again, please.');
    expect(messages[0]!.text).toBe('{"type":"status","data":"ack"}');
    const errors = messages.filter((message) => message.headers['Nats-Service-Error-Code'] !== undefined);
    expect(errors).toHaveLength(1);
    expect(errors[0]!.headers['Nats-Service-Error-Code']).toBe('500');
    // Header values are one line.
    expect(errors[0]!.headers['Nats-Service-Error']).not.toMatch(/\n/);
    expect(JSON.parse(errors[0]!.text)).toMatchObject({ error: 'turn_failed', message: expect.stringContaining('the model is down') });
    expect(messages.indexOf(errors[0]!)).toBe(messages.length - 2);
    expect(isTerminator(messages.at(-1)!)).toBe(true);
  });

  it('takes the JSON envelope, leading whitespace included, and relays its unknown top-level fields with the prompt (§5.6)', async () => {
    const body = `  \n{"prompt":"Hello?","attachments":[],"x_trace":{"id":"t-1"},"future_field":true}`;
    // The session's log, as any observer with the right may read it: the prompt and the fields relayed with it.
    const logged: Array<{ type: string; data: { text?: string; metadata?: unknown } }> = [];
    const log = caller.subscribe('agentbus.acme.sessions.*.log', {
      callback: (_error, message) => {
        logged.push(codec.decode(message.data, contentTypeOf(message)) as (typeof logged)[number]);
      },
    });
    const messages = await promptStream(caller, FRESH, body);
    log.unsubscribe();
    const userMessage = logged.find((event) => event.type === 'user.message' && event.data.text === 'Hello?');
    expect(userMessage?.data.metadata).toEqual({ agentProtocol: { x_trace: { id: 't-1' }, future_field: true } });
    expect(messages[0]!.text).toBe('{"type":"status","data":"ack"}');
    expect(messages.slice(1, -1).map(chunkOf).filter((chunk) => chunk.type === 'response').map((chunk) => chunk.data).join('')).toBe(ANSWER);
    expect(isTerminator(messages.at(-1)!)).toBe(true);
  });

  it('refuses with 400 (and no ack) a zero-byte request, bad JSON, a missing or empty prompt, bad base64, any attachment, and a payload over max_payload', async () => {
    const attachment = (content: string) => JSON.stringify({ prompt: 'see file', attachments: [{ filename: 'a.txt', content }] });
    const bad: Array<[string, Uint8Array | string]> = [
      ['zero bytes', new Uint8Array(0)],
      ['malformed JSON', '{"prompt": "unterminated'],
      ['no prompt', '{"text":"hello"}'],
      ['prompt not a string', '{"prompt":42}'],
      ['empty prompt', '{"prompt":""}'],
      ['URL-safe base64', attachment('aGk-_w==')],
      ['base64 with whitespace', attachment('aGVs bG8=')],
      ['unpadded base64', attachment('aGk')],
      ['an attachment where attachments_ok is "false"', attachment('aGVsbG8=')],
      ['over max_payload (1KB)', 'x'.repeat(1025)],
    ];
    for (const [, body] of bad) expectBadRequest(await promptStream(caller, FRESH, body, { settleMs: 100 }));
  });

  it('answers only a caller inbox: a reply subject naming a session verb gets nothing', async () => {
    const forged: string[] = [];
    const watch = await connect({ servers: server.url });
    try {
      const subscription = watch.subscribe('agentbus.acme.sessions.victim.prompt', { callback: (_error, message) => {
        forged.push(message.subject);
      } });
      await watch.flush();
      caller.publish(SUPPORT, 'hello', { reply: 'agentbus.acme.sessions.victim.prompt' });
      caller.publish('agents.status.agentbus.acme.support', '', { reply: 'agentbus.acme.sessions.victim.prompt' });
      await caller.flush();
      await new Promise((resolve) => setTimeout(resolve, 500));
      subscription.unsubscribe();
      expect(forged).toEqual([]);
    } finally {
      await watch.close();
    }
  });
});

describe('several instances of one agent (§3.4)', () => {
  it('shares each prompt and status request among instances through queue group `agents`: each answered once', async () => {
    const second = startServiceProcess('services/agents/main.ts', agentsEnv);
    processes.push(second);
    await second.waitFor('agents service started', 60_000);
    const pings = (await gather('$SRV.PING.agents')) as Array<{ id: string }>;
    expect(pings).toHaveLength(4);
    const instances = new Set<string>();
    for (let index = 0; index < 20; index += 1) {
      const replies = await gather('agents.status.agentbus.acme.fresh', '', 300);
      expect(replies).toHaveLength(1);
      instances.add((replies[0] as { instance_id: string }).instance_id);
    }
    expect(instances.size).toBe(2);
    const messages = await promptStream(caller, FRESH, 'Who answers?');
    expect(messages.filter((message) => message.text === '{"type":"status","data":"ack"}').length).toBeGreaterThanOrEqual(1);
    expect(messages[0]!.text).toBe('{"type":"status","data":"ack"}');
    expect(messages.filter(isTerminator)).toHaveLength(1);
  }, 90_000);
});
