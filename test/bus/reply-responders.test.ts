import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { pino } from 'pino';
import { z } from 'zod';
import type { Msg, NatsConnection, Subscription } from '@nats-io/nats-core';
import { connect } from '@nats-io/transport-node';
import { createHookClient } from '../../src/bus/hook-client.ts';
import { msgpackHeaders } from '../../src/bus/request.ts';
import { createToolClient } from '../../src/bus/tool-client.ts';
import { createCodec, createSubjects } from '../../src/protocol/index.ts';
import type { BeforeHookRequest } from '../../src/protocol/index.ts';
import { createHookWorker, createToolWorker, defineTool } from '../../src/tool-sdk/index.ts';
import type { HookWorker, ToolWorker } from '../../src/tool-sdk/index.ts';
import { startProviderService } from '../../services/provider/index.ts';
import type { ProviderService } from '../../services/provider/index.ts';
import { useNatsServer } from '../helpers/nats-fixture.ts';

// The responders of no tenant (tool worker, hook worker, provider, and their `$SRV` answers) on a server without
// users: deputy requests whose reply subject is a data subject (a session log, a state key) are not answered there,
// counted nowhere, and the honest requests beside them are answered as ever.

const nats = useNatsServer();
const logger = pino({ level: 'silent' });
const codec = createCodec();
const PREFIX = 'rr';
const subjects = createSubjects(PREFIX);
const TARGETS = [`${PREFIX}.globex.sessions.s1.log`, '$KV.RR_STATE.globex.k'] as const;

const echo = defineTool({
  name: 'echo',
  description: 'Echoes its text',
  parameters: z.object({ text: z.string() }),
  tier: 'read_only',
  timeoutMs: 5_000,
  idempotent: true,
  execute: ({ text }) => text,
});

let client: NatsConnection;
let tools: ToolWorker;
let hooks: HookWorker;
let provider: ProviderService;
const landed: Msg[] = [];
const watches: Subscription[] = [];

beforeAll(async () => {
  // The services connect without a user name: an open deployment, where `_INBOX.` is every connection's inbox.
  tools = createToolWorker({ nc: nats.nc, subjects, codec, logger, tools: [echo], version: '1.0.0', ledger: false });
  await tools.start();
  hooks = createHookWorker({ nc: nats.nc, subjects, codec, logger, name: 'audit', version: '1.0.0', before: () => ({ action: 'continue' }) });
  await hooks.start();
  provider = await startProviderService({ nc: nats.nc, logger, prefix: PREFIX, script: { responses: [{ text: 'hello' }] } });
  client = await connect({ servers: nats.server.url });
  for (const target of TARGETS) watches.push(client.subscribe(target, { callback: (_error, message) => void landed.push(message) }));
  await client.flush();
});

afterAll(async () => {
  for (const watch of watches) watch.unsubscribe();
  await tools?.stop();
  await hooks?.stop();
  await provider?.stop();
  await client?.close();
});

const toolCall = (callId: string) => ({ v: 1 as const, callId, effectId: `s:t:${callId}`, name: 'echo', args: { text: callId }, tenant: 'acme', sessionId: 's', turnId: 't', deadline: Date.now() + 5_000 });
const hookRequest = (callId: string): BeforeHookRequest => ({ v: 1, callId, effectId: `s:t:${callId}`, name: 'echo', args: {}, tier: 'read_only', tenant: 'acme', sessionId: 's', turnId: 't', deadline: Date.now() + 5_000 });
const generate = (requestId: string) => ({ v: 1, requestId, model: 'scripted:default', messages: [{ role: 'user', content: 'hi' }], tools: [] });

async function statsOf(name: string): Promise<Record<string, { num_requests: number; num_errors: number }>> {
  const answer = await client.request(`$SRV.STATS.${name}`, undefined, { timeout: 5_000 });
  const stats = JSON.parse(new TextDecoder().decode(answer.data)) as { endpoints: Array<{ name: string; num_requests: number; num_errors: number }> };
  return Object.fromEntries(stats.endpoints.map((endpoint) => [endpoint.name, endpoint]));
}

describe('responders of no tenant answer only inboxes, and a refused request harms nothing', () => {
  it('sends nothing to a data subject given as the reply, counts nothing, and answers the honest requests beside it', async () => {
    for (const target of TARGETS) {
      const publish = (subject: string, body: unknown) => client.publish(subject, body === undefined ? undefined : codec.encode(body), { reply: target, headers: msgpackHeaders() });
      publish(subjects.toolCall('echo'), toolCall(`deputy-${target}`));
      publish(subjects.toolCancel('echo'), {}); // malformed: every worker would answer it with a refusal
      publish(subjects.toolHook('audit', 'before'), hookRequest(`deputy-${target}`));
      publish(subjects.providerGenerate('scripted'), generate(`deputy-${target}`));
      publish(subjects.providerEmbed('scripted'), { v: 1, id: 'deputy', input: ['x'] });
      publish(subjects.providerCancel('scripted'), {}); // malformed, likewise
      publish('$SRV.PING', undefined);
      publish('$SRV.STATS.agentbus-tools', undefined);
    }
    await client.flush();

    // The honest requests, answered in the client's own inbox.
    const toolReply = await createToolClient({ nc: client, subjects, codec, logger }).call(toolCall('honest'), { timeoutMs: 5_000 });
    expect(toolReply).toMatchObject({ ok: true, output: 'honest' });
    const decided = await createHookClient({ nc: client, subjects, codec, logger }).before('audit', hookRequest('honest'), { signal: new AbortController().signal, timeoutMs: 5_000 });
    expect(decided).toMatchObject({ ok: true, reply: { action: 'continue' } });
    const embedded = await client.request(subjects.providerEmbed('scripted'), codec.encode({ v: 1, id: 'honest', input: ['x'] }), { timeout: 5_000, headers: msgpackHeaders() });
    expect(codec.decode(embedded.data)).toMatchObject({ id: 'honest', vectors: [expect.any(Array)] });
    const pinged = await client.request('$SRV.PING.agentbus-hooks', undefined, { timeout: 5_000 });
    expect(JSON.parse(new TextDecoder().decode(pinged.data))).toMatchObject({ name: 'agentbus-hooks' });

    // Only the honest requests count; the workers go on serving.
    expect((await statsOf('agentbus-tools'))['echo']).toMatchObject({ num_requests: 1, num_errors: 0 });
    expect((await statsOf('agentbus-hooks'))['audit-before']).toMatchObject({ num_requests: 1, num_errors: 0 });
    const providerStats = await statsOf('agentbus-provider');
    expect(providerStats['scripted']).toMatchObject({ num_requests: 0 });
    expect(providerStats['scripted-embed']).toMatchObject({ num_requests: 1, num_errors: 0 });
    expect(tools.activeCalls).toBe(0);

    await client.flush();
    expect(landed.map((message) => message.subject)).toEqual([]);
  });
});
