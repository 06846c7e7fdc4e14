import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { connect } from '@nats-io/transport-node';
import type { NatsConnection } from '@nats-io/nats-core';
import { Kvm } from '@nats-io/kv';
import { createAgentbusClient } from '../../src/client/index.ts';
import type { AgentbusClient } from '../../src/client/index.ts';
import { createCodec } from '../../src/protocol/index.ts';
import type { LogEvent } from '../../src/protocol/index.ts';
import { startProviderService } from '../../services/provider/index.ts';
import type { ProviderService } from '../../services/provider/index.ts';
import { startNatsServer } from '../helpers/nats-server.ts';
import type { TestNatsServer } from '../helpers/nats-server.ts';
import { startServiceProcess } from '../helpers/service-process.ts';
import type { ServiceProcess } from '../helpers/service-process.ts';
import { offlineEnv, runAgentbus } from '../helpers/agentbus-bin.ts';
import { silentLogger } from '../helpers/stack.ts';

// Fork and replay end to end: two runtime nodes and memory as real processes, a real nats-server, the provider
// echoing the last user message. A fork's history is its source's log up to the fork point, read by reference.

const codec = createCodec();
const TENANT = 'fk';
let nats: TestNatsServer;
let services: NatsConnection;
let connection: NatsConnection;
let client: AgentbusClient;
let provider: ProviderService;
const nodes: Record<string, ServiceProcess> = {};
let memory: ServiceProcess;

const target = (sessionId: string) => ({ tenant: TENANT, sessionId });

/** One real turn; resolves with its end reason. */
async function turn(sessionId: string, text: string): Promise<string> {
  const ended = await client.ask(target(sessionId), { text }, { timeoutMs: 20_000 });
  return ended.reason;
}

/** A session's whole history, as memory serves it (every page). */
async function history(sessionId: string): Promise<LogEvent[]> {
  const events: LogEvent[] = [];
  let afterSeq: number | undefined;
  for (;;) {
    const page = await client.history(target(sessionId), afterSeq === undefined ? {} : { afterSeq }, { timeoutMs: 10_000 });
    events.push(...page.events);
    if (page.nextAfterSeq === undefined) return events;
    afterSeq = page.nextAfterSeq;
  }
}

const userTexts = (events: readonly LogEvent[]) => events.flatMap((event) => (event.type === 'user.message' ? [event.data.text] : []));

/** What the first step of a prompt into `sessionId` would send the model (a dry run: nothing logged, no model called). */
async function preparedMessages(sessionId: string, text: string): Promise<string> {
  const subscription = connection.subscribe(`agentbus.${TENANT}.sessions.${sessionId}.live.request.prepared`, { max: 1 });
  const prepared = (async () => {
    for await (const message of subscription) return codec.decode(message.data, message.headers?.get('Content-Type')) as { data: { messages: unknown[] } };
    throw new Error('no request.prepared');
  })();
  await connection.flush();
  await client.prompt(target(sessionId), { text, dryRun: true }, { timeoutMs: 10_000 });
  const event = await Promise.race([prepared, new Promise<never>((_, reject) => setTimeout(() => reject(new Error('no request.prepared within 10 s')), 10_000))]);
  return JSON.stringify(event.data.messages);
}

async function holderOf(sessionId: string): Promise<string | undefined> {
  const leases = await new Kvm(connection).open('AGENTBUS_LEASES');
  const entry = await leases.get(`${TENANT}.${sessionId}`);
  return entry?.operation === 'PUT' ? (codec.decode(entry.value) as { node: string }).node : undefined;
}

describe.each(['broadcast', 'queue'] as const)('fork and replay (%s ingress)', (ingress) => {
  beforeAll(async () => {
    nats = await startNatsServer();
    services = await connect({ servers: nats.url });
    connection = await connect({ servers: nats.url });
    client = createAgentbusClient({ nc: connection });
    provider = await startProviderService({ nc: services, logger: silentLogger(), script: { responses: [] } });
    for (const key of Object.keys(nodes)) delete nodes[key];
    for (const id of ['node-a', 'node-b']) nodes[id] = startServiceProcess('services/runtime/main.ts', { NATS_URL: nats.url, AGENTBUS_NODE_ID: id, AGENTBUS_MODEL: 'scripted:default', AGENTBUS_INGRESS: ingress });
    memory = startServiceProcess('services/memory/main.ts', { NATS_URL: nats.url });
    await Promise.all([...Object.values(nodes).map((node) => node.waitFor('runtime started', 30_000)), memory.waitFor('memory caught up with the log', 30_000)]);
  }, 60_000);

  afterAll(async () => {
    for (const node of [...Object.values(nodes), memory]) await node?.stop('SIGTERM').catch(() => undefined);
    await provider?.stop();
    await connection?.close();
    await services?.close();
    await nats?.stop();
  });

  let source: LogEvent[];
  let regenerated: string;

  it('forks a session at its end: the fork inherits the whole history by reference and its model sees it', async () => {
    expect(await turn('src', 'alpha question')).toBe('yielded');
    expect(await turn('src', 'beta question')).toBe('yielded');
    source = await history('src');
    const forked = await client.forkSession(target('src'), {}, { timeoutMs: 10_000 });
    expect(forked.atSeq).toBe(source.at(-1)!.seq);
    expect(forked.sessionId).toMatch(/^[A-Za-z0-9_-]{1,64}$/);
    // Nothing copied: the fork's own log holds its session.created and session.forked only.
    const own = (await history(forked.sessionId)).filter((event) => event.sessionId === forked.sessionId);
    expect(own.map((event) => event.type)).toEqual(['session.created', 'session.forked']);
    expect(own[1]).toMatchObject({ data: { parentSessionId: 'src', parentSeq: forked.atSeq } });
    const inherited = await history(forked.sessionId);
    expect(userTexts(inherited)).toEqual(['alpha question', 'beta question']);
    const messages = await preparedMessages(forked.sessionId, 'what did I ask?');
    expect(messages).toContain('alpha question');
    expect(messages).toContain('beta question');
  });

  it('regenerates: a fork before a user message, cut back to the last whole point, then a prompt', async () => {
    const beta = source.find((event) => event.type === 'user.message' && event.data.text === 'beta question')!;
    const alphaEnd = source.filter((event) => event.type === 'turn.ended')[0]!;
    // Forking at the user message itself: that turn has not ended there, so the fork is cut back before it.
    const forked = await client.forkSession(target('src'), { atSeq: beta.seq!, sessionId: 'regen' }, { timeoutMs: 10_000 });
    expect(forked).toEqual({ sessionId: 'regen', atSeq: alphaEnd.seq });
    regenerated = forked.sessionId;
    expect(await turn(regenerated, 'gamma question')).toBe('yielded');
    const events = await history(regenerated);
    expect(userTexts(events)).toEqual(['alpha question', 'gamma question']);
    expect(events.map((event) => event.seq)).toEqual([...events.map((event) => event.seq)].sort((a, b) => a! - b!));
    // The source is untouched.
    expect(userTexts(await history('src'))).toEqual(['alpha question', 'beta question']);
  });

  it('forks a fork, and a fork point may name an inherited event', async () => {
    const fromFork = await client.forkSession(target(regenerated), {}, { timeoutMs: 10_000 });
    expect(userTexts(await history(fromFork.sessionId))).toEqual(['alpha question', 'gamma question']);
    const messages = await preparedMessages(fromFork.sessionId, 'and now?');
    expect(messages).toContain('gamma question');
    expect(messages).not.toContain('beta question');
    const alphaEnd = source.filter((event) => event.type === 'turn.ended')[0]!;
    const early = await client.forkSession(target(fromFork.sessionId), { atSeq: alphaEnd.seq! }, { timeoutMs: 10_000 });
    expect(early.atSeq).toBe(alphaEnd.seq);
    expect(userTexts(await history(early.sessionId))).toEqual(['alpha question']);
  });

  it('a fork survives failover: the node that takes it over reads the parent chain again', async () => {
    const forked = await client.forkSession(target(regenerated), { sessionId: 'survivor' }, { timeoutMs: 10_000 });
    expect(await turn(forked.sessionId, 'delta question')).toBe('yielded');
    const holder = (await holderOf(forked.sessionId))!;
    expect(Object.keys(nodes)).toContain(holder);
    await nodes[holder]!.stop('SIGKILL');
    delete nodes[holder];
    expect(await turn(forked.sessionId, 'epsilon question')).toBe('yielded');
    expect(await holderOf(forked.sessionId)).not.toBe(holder);
    const messages = await preparedMessages(forked.sessionId, 'recap');
    for (const text of ['alpha question', 'gamma question', 'delta question', 'epsilon question']) expect(messages).toContain(text);
    expect(messages).not.toContain('beta question');
  }, 60_000);

  it('refuses a fork point that is not in the history, an unknown or deleted source, and an id in use', async () => {
    const beta = source.find((event) => event.type === 'user.message' && event.data.text === 'beta question')!;
    // beta is in src's log, not in regen's history (regen was forked before it).
    await expect(client.forkSession(target(regenerated), { atSeq: beta.seq! }, { timeoutMs: 10_000 })).rejects.toMatchObject({ code: 'invalid_input', message: expect.stringContaining(`atSeq ${beta.seq}`) });
    await expect(client.forkSession(target('src'), { atSeq: 10_000_000 }, { timeoutMs: 10_000 })).rejects.toMatchObject({ code: 'invalid_input' });
    await expect(client.forkSession(target('never-was'), {}, { timeoutMs: 10_000 })).rejects.toMatchObject({ code: 'not_found' });
    await expect(client.forkSession(target('src'), { sessionId: 'regen' }, { timeoutMs: 10_000 })).rejects.toMatchObject({ code: 'conflict' });
    const doomed = await client.forkSession(target('src'), {}, { timeoutMs: 10_000 });
    await client.deleteSession(target(doomed.sessionId), { timeoutMs: 10_000 });
    await expect(client.forkSession(target(doomed.sessionId), {}, { timeoutMs: 10_000 })).rejects.toMatchObject({ code: 'session_deleted' });
    // A malformed body is refused as bad input.
    await expect(client.forkSession(target('src'), { atSeq: -1 } as never, { timeoutMs: 10_000 })).rejects.toMatchObject({ code: 'invalid_input' });
  });

  it('lists a fork with its parent and fork point', async () => {
    await expect
      .poll(async () => (await client.listSessions(TENANT, { limit: 500 })).sessions.find((session) => session.sessionId === regenerated), { timeout: 10_000 })
      .toMatchObject({ forkedFrom: { sessionId: 'src', seq: source.filter((event) => event.type === 'turn.ended')[0]!.seq } });
    const plain = (await client.listSessions(TENANT, { limit: 500 })).sessions.find((session) => session.sessionId === 'src');
    expect(plain?.forkedFrom).toBeUndefined();
  });

  it('agentbus fork prints the new session id, and agentbus show prints the inherited history', async () => {
    const env = { ...offlineEnv(), NATS_URL: nats.url, AGENTBUS_FROM_SOURCE: '1' };
    const alphaEnd = source.filter((event) => event.type === 'turn.ended')[0]!;
    const run = await runAgentbus(['fork', 'src', '--at', String(alphaEnd.seq), '--tenant', TENANT], { cwd: process.cwd(), env, timeoutMs: 60_000 });
    expect(run.stderr).toBe('');
    expect(run.code).toBe(0);
    const sessionId = run.stdout.trim();
    expect(sessionId).toMatch(/^[A-Za-z0-9_-]{1,64}$/);
    const show = await runAgentbus(['show', sessionId, '--tenant', TENANT], { cwd: process.cwd(), env, timeoutMs: 60_000 });
    expect(show.code).toBe(0);
    expect(show.stdout).toContain('user: alpha question');
    expect(show.stdout).not.toContain('beta question');
    expect(show.stdout).toContain(`forked from src at seq ${alphaEnd.seq}`);
    const bad = await runAgentbus(['fork', 'src', '--at', 'soon', '--tenant', TENANT], { cwd: process.cwd(), env, timeoutMs: 60_000 });
    expect(bad.code).toBe(2);
    expect(bad.stderr).toContain('--at must be a log sequence');
  }, 120_000);
});
