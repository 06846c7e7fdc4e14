import { mkdtemp, rm, writeFile } from 'node:fs/promises';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { jetstreamManager } from '@nats-io/jetstream';
import { Kvm } from '@nats-io/kv';
import type { KV } from '@nats-io/kv';
import type { NatsConnection } from '@nats-io/nats-core';
import { busOptionsFromEnv, connectBus } from '../../src/bus/connect.ts';
import { ServiceInboxPrefix } from '../../src/bus/inbox.ts';
import { msgpackHeaders } from '../../src/bus/request.ts';
import { connectCli } from '../../cli/connect.ts';
import { createAgentbusClient } from '../../src/client/index.ts';
import type { AgentbusClient } from '../../src/client/index.ts';
import { createLogger } from '../../src/logging.ts';
import { createCodec } from '../../src/protocol/index.ts';
import { startServiceProcess } from '../helpers/service-process.ts';
import type { ServiceProcess } from '../helpers/service-process.ts';
import { ShippedConf, startShippedNats } from '../helpers/shipped-nats.ts';
import type { ShippedNats } from '../helpers/shipped-nats.ts';

// The confused deputy through the reply subject (issue #16): a tenant sends a request it may send, on its own
// subject, with the reply subject of something only a service may write (another tenant's state key, tombstone,
// lease or session log). NATS checks the subject against the tenant's permissions, not the reply subject, and the
// service would answer there with its own grants. Each case below does it as `acme`, reads the target back as a
// privileged user, and checks that the honest request (answered in `_INBOX_acme`) still works.

/** The config the services and tenants log in with; one constant, so it can be pointed at another layout. */
// The users layout: there a tenant shares the services' account, and only the reply guard stands between its reply
// subject and the services' grants (in the accounts layout its replies come back through `_R_.` into its own account).
const SHIPPED_CONF = ShippedConf.users;

const codec = createCodec();
const USERS = ['runtime', 'provider', 'memory', 'client', 'acme', 'globex'] as const;
type User = (typeof USERS)[number];
const SCRIPT = { responses: [{ text: 'Done.' }] };
const stamp = Date.now().toString(36);
const globexSession = `g-${stamp}`;
const GLOBEX_KEY = 'plans';
const GLOBEX_VALUE = { secret: 'globex only' };

let nats: ShippedNats;
let scriptDir: string;
const processes: ServiceProcess[] = [];
let acme: NatsConnection;
let globex: NatsConnection;
let acmeClient: AgentbusClient;
let globexClient: AgentbusClient;
const privileged: NatsConnection[] = [];

/** A connection as a service user, with its own inbox, for reading targets back. */
async function connectAs(user: 'runtime' | 'memory' | 'client'): Promise<NatsConnection> {
  const inboxPrefix = user === 'client' ? '_INBOX_client' : ServiceInboxPrefix[user];
  const nc = await connectBus({
    servers: nats.url,
    name: `reply-deputy-${user}`,
    logger: createLogger({ name: 'reply-deputy', level: 'silent' }),
    ...busOptionsFromEnv({ NATS_USER: user, NATS_PASSWORD: nats.passwords[user]! }, inboxPrefix),
  });
  privileged.push(nc);
  return nc;
}

/** Publishes `body` (msgpack) on `subject` as acme, with `reply` as its reply subject: the deputy request. */
async function asDeputy(subject: string, body: unknown, reply: string): Promise<void> {
  acme.publish(subject, codec.encode(body), { reply, headers: msgpackHeaders() });
  await acme.flush();
}

/** A request as acme, answered in `_INBOX_acme`, decoded. */
async function honest(subject: string, body: unknown): Promise<Record<string, unknown>> {
  const answer = await acme.request(subject, codec.encode(body), { timeout: 10_000, headers: msgpackHeaders() });
  return codec.decode(answer.data, answer.headers?.get('Content-Type')) as Record<string, unknown>;
}

/** A key's entry as the bucket holds it (revision and bytes), read as a service user; undefined when there is none. */
async function entryOf(kv: KV, key: string): Promise<{ revision: number; bytes: string } | undefined> {
  const entry = await kv.get(key);
  if (!entry || entry.operation !== 'PUT') return undefined;
  return { revision: entry.revision, bytes: Buffer.from(entry.value).toString('hex') };
}

beforeAll(async () => {
  nats = await startShippedNats({ file: SHIPPED_CONF });
  scriptDir = await mkdtemp(join(tmpdir(), 'agentbus-reply-deputy-'));
  const script = join(scriptDir, 'script.json');
  await writeFile(script, JSON.stringify(SCRIPT));
  const as = (user: User) => ({ NATS_URL: nats.url, NATS_USER: user, NATS_PASSWORD: nats.passwords[user]!, AGENTBUS_MODEL: 'scripted:default' });
  const runtime = startServiceProcess('services/runtime/main.ts', as('runtime'));
  const provider = startServiceProcess('services/provider/main.ts', { ...as('provider'), AGENTBUS_SCRIPT: script });
  const memory = startServiceProcess('services/memory/main.ts', as('memory'));
  processes.push(runtime, provider, memory);
  await Promise.all([runtime.waitFor('runtime started', 40_000), provider.waitFor('provider service started', 40_000), memory.waitFor('memory caught up with the log', 40_000)]);
  acme = await connectCli(nats.url, 'acme-app', { NATS_USER: 'acme', NATS_PASSWORD: nats.passwords['acme']! });
  globex = await connectCli(nats.url, 'globex-app', { NATS_USER: 'globex', NATS_PASSWORD: nats.passwords['globex']! });
  acmeClient = createAgentbusClient({ nc: acme });
  globexClient = createAgentbusClient({ nc: globex });
  // Something of globex's to aim at: a session with a log and a lease, and a state key.
  const ended = await globexClient.ask({ tenant: 'globex', sessionId: globexSession }, { text: 'globex only' }, { timeoutMs: 30_000, readyTimeoutMs: 20_000 });
  expect(ended.reason).toBe('yielded');
  await globexClient.state('globex').save(GLOBEX_KEY, GLOBEX_VALUE);
}, 90_000);

afterAll(async () => {
  for (const nc of [acme, globex, ...privileged]) await nc?.close().catch(() => undefined);
  await Promise.all(processes.map((process) => process.stop('SIGTERM')));
  await nats?.stop();
  if (scriptDir) await rm(scriptDir, { recursive: true, force: true });
});

describe(`a tenant cannot turn a service's answer against another tenant (${SHIPPED_CONF})`, () => {
  it('memory answers no state request into the state bucket: globex’s key stays as globex saved it', async () => {
    const state = await new Kvm(await connectAs('memory')).open('AGENTBUS_STATE');
    const before = await entryOf(state, `globex.${GLOBEX_KEY}`);
    expect(before).toBeDefined();
    const target = `$KV.AGENTBUS_STATE.globex.${GLOBEX_KEY}`;
    await asDeputy('agentbus.acme.state.load', { key: 'anything' }, target);
    await asDeputy('agentbus.acme.state.save', { key: 'deputy', value: { from: 'acme' } }, target);
    // The honest requests, answered in _INBOX_acme, come after the deputy ones on the same memory instance.
    expect(await honest('agentbus.acme.state.save', { key: 'mine', value: 1 })).toMatchObject({ revision: expect.any(Number) });
    expect(await acmeClient.state('acme').load('mine')).toMatchObject({ found: true, value: 1 });

    expect(await entryOf(state, `globex.${GLOBEX_KEY}`)).toEqual(before);
    expect(await globexClient.state('globex').load(GLOBEX_KEY)).toMatchObject({ found: true, value: GLOBEX_VALUE, revision: before!.revision });
    // A refused request is dropped whole: its save was not done either.
    expect(await acmeClient.state('acme').load('deputy')).toMatchObject({ found: false });
  });

  it('the runtime answers no session verb into the tombstones bucket: globex’s session is not deleted', async () => {
    const tombstones = await new Kvm(await connectAs('runtime')).open('AGENTBUS_TOMBSTONES');
    const acmeSession = `a-del-${stamp}`;
    await asDeputy(`agentbus.acme.sessions.${acmeSession}.delete`, {}, `$KV.AGENTBUS_TOMBSTONES.globex.${globexSession}`);
    await asDeputy(`agentbus.acme.sessions.${acmeSession}.prompt`, { text: 'hello' }, `$KV.AGENTBUS_TOMBSTONES.globex.${globexSession}`);
    // The honest delete of a session of acme's, answered in _INBOX_acme.
    const honestSession = `a-honest-del-${stamp}`;
    expect((await acmeClient.ask({ tenant: 'acme', sessionId: honestSession }, { text: 'hello' }, { timeoutMs: 20_000 })).reason).toBe('yielded');
    expect(await acmeClient.deleteSession({ tenant: 'acme', sessionId: honestSession })).toMatchObject({ purged: expect.any(Number), alreadyDeleted: false });
    expect(await entryOf(tombstones, `acme.${honestSession}`)).toBeDefined();

    expect(await entryOf(tombstones, `globex.${globexSession}`)).toBeUndefined();
    // globex's session lives on: its next prompt is taken.
    // Asked, not only prompted: the turn ends before the next test counts globex's log events (a turn still running
    // would append its own events there while that test counts).
    await expect(globexClient.ask({ tenant: 'globex', sessionId: globexSession }, { text: 'still mine' }, { timeoutMs: 20_000 })).resolves.toMatchObject({ reason: 'yielded' });
  });

  it('the runtime answers no session verb into the leases bucket: globex’s lease is untouched', async () => {
    const leases = await new Kvm(await connectAs('runtime')).open('AGENTBUS_LEASES');
    const leaseOf = async () => {
      const entry = await leases.get(`globex.${globexSession}`);
      return entry?.operation === 'PUT' ? (codec.decode(entry.value) as Record<string, unknown>) : undefined;
    };
    // The runtime itself rewrites the lease (active, released) as globex's turns come and go; what matters is that it
    // stays a lease, written by the runtime, and never becomes an answer to acme.
    expect(await leaseOf()).toMatchObject({ node: expect.any(String) });
    const acmeSession = `a-lease-${stamp}`;
    await asDeputy(`agentbus.acme.sessions.${acmeSession}.cancel`, {}, `$KV.AGENTBUS_LEASES.globex.${globexSession}`);
    await asDeputy(`agentbus.acme.sessions.${acmeSession}.steer`, { text: 'x' }, `$KV.AGENTBUS_LEASES.globex.${globexSession}`);
    // The honest cancel is answered (the session does not exist, and the answer says so) in _INBOX_acme.
    expect(await honest(`agentbus.acme.sessions.${acmeSession}.cancel`, {})).toMatchObject({ ok: false, error: { code: 'not_found' } });

    const lease = await leaseOf();
    expect(lease).toMatchObject({ node: expect.any(String) });
    expect(lease).not.toHaveProperty('ok');
    expect(lease).not.toHaveProperty('error');
  });

  it('the runtime answers no prompt onto another tenant’s session log: globex’s log keeps its events', async () => {
    const jsm = await jetstreamManager(await connectAs('client'));
    const logSubject = `agentbus.globex.sessions.${globexSession}.log`;
    const countOf = async (subject: string) => (await jsm.streams.info('AGENTBUS_LOG', { subjects_filter: subject })).state.subjects?.[subject] ?? 0;
    const count = () => countOf(logSubject);
    const before = await count();
    expect(before).toBeGreaterThan(0);
    const acmeSession = `a-log-${stamp}`;
    await asDeputy(`agentbus.acme.sessions.${acmeSession}.prompt`, { text: 'hello' }, logSubject);
    // The honest prompt, answered in _INBOX_acme, runs its turn.
    const ended = await acmeClient.ask({ tenant: 'acme', sessionId: `a-honest-${stamp}` }, { text: 'hello' }, { timeoutMs: 20_000 });
    expect(ended.reason).toBe('yielded');

    expect(await count()).toBe(before);
    const events = (await globexClient.history({ tenant: 'globex', sessionId: globexSession }, { limit: 500 })).events;
    expect(events.every((event) => event.tenant === 'globex' && event.sessionId === globexSession)).toBe(true);
    // The refused prompt was not run: acme's session has no log.
    expect(await countOf(`agentbus.acme.sessions.${acmeSession}.log`)).toBe(0);
  });

  it('logs the refusals, bounded', () => {
    const runtimeOutput = processes[0]!.output();
    const memoryOutput = processes[2]!.output();
    expect(memoryOutput).toContain('$KV.AGENTBUS_STATE.globex');
    expect(runtimeOutput).toContain('$KV.AGENTBUS_TOMBSTONES.globex');
    // At most two lines per interval, whatever comes in: not one per refused request.
    expect(memoryOutput.split('\n').filter((line) => line.includes('AGENTBUS_STATE.globex')).length).toBeLessThanOrEqual(2);
  });
});
