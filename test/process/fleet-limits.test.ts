import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { mkdtemp, rm, writeFile } from 'node:fs/promises';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { connect } from '@nats-io/transport-node';
import type { NatsConnection } from '@nats-io/nats-core';
import { Kvm } from '@nats-io/kv';
import { createCodec } from '../../src/protocol/index.ts';
import type { AgentEvent } from '../../src/protocol/index.ts';
import { rendezvousOwner } from '../../services/runtime/node/rendezvous.ts';
import { startNatsServer } from '../helpers/nats-server.ts';
import type { TestNatsServer } from '../helpers/nats-server.ts';
import { startServiceProcess } from '../helpers/service-process.ts';
import type { ServiceProcess } from '../helpers/service-process.ts';
import { collectEvents, requestJson } from '../helpers/stack.ts';

// Fleet-wide limits with every part a real process: two provider instances (the scripted provider, whose script
// gives each session's first call a cost of 0.4 USD) and two runtime nodes, all counting in one limits bucket of a
// real nats-server. A rate limit of 3 requests per minute on one model holds across both nodes and both providers;
// a tenant's daily spend limit of 1 USD refuses its next prompt on either node once spent; another tenant goes on.

const codec = createCodec();
const NODES = ['limits-a', 'limits-b'] as const;
const RATED = 'scripted:rated';
const LIMIT = 3;
let server: TestNatsServer;
let client: NatsConnection;
let scriptDir: string;
const processes: ServiceProcess[] = [];

/** Session ids of `tenant` that rendezvous hashing gives to each node in turn: a, b, a, b, … */
function sessionsAcrossNodes(tenant: string, prefix: string, count: number): string[] {
  const ids: string[] = [];
  for (let index = 0; ids.length < count; index++) {
    const id = `${prefix}-${index}`;
    if (rendezvousOwner(`${tenant}.${id}`, NODES) === NODES[ids.length % 2]) ids.push(id);
  }
  return ids;
}

/** The node holding a session's lease. */
async function holderOf(tenant: string, sessionId: string): Promise<string | undefined> {
  const entry = await (await new Kvm(client).open('AGENTBUS_LEASES')).get(`${tenant}.${sessionId}`);
  return entry?.operation === 'PUT' ? (codec.decode(entry.value) as { node: string }).node : undefined;
}

/** Prompts a session and waits for its turn's end; the events seen. */
async function ask(tenant: string, sessionId: string, body: Record<string, unknown>): Promise<AgentEvent[]> {
  const events = collectEvents(client, tenant, sessionId);
  try {
    expect(await requestJson(client, `agentbus.${tenant}.sessions.${sessionId}.prompt`, body, 15_000)).toMatchObject({ accepted: true });
    return await events.until((seen) => seen.some((event) => event.type === 'turn.ended'), 20_000);
  } finally {
    events.stop();
  }
}

const ended = (events: readonly AgentEvent[]) => events.find((event) => event.type === 'turn.ended');

beforeAll(async () => {
  server = await startNatsServer();
  client = await connect({ servers: server.url });
  scriptDir = await mkdtemp(join(tmpdir(), 'agentbus-limits-'));
  const script = join(scriptDir, 'script.json');
  await writeFile(script, JSON.stringify({ responses: [{ text: 'a paid answer', cost: 0.4, usage: { inputTokens: 100, outputTokens: 20 } }] }));
  // Two at a time: four processes compiling at once on a loaded machine take a minute to start.
  const providers = [0, 1].map(() => startServiceProcess('services/provider/main.ts', { NATS_URL: server.url, AGENTBUS_SCRIPT: script }));
  processes.push(...providers);
  await Promise.all(providers.map((provider) => provider.waitFor('provider service started', 90_000)));
  // The rate window slides (the previous minute's count weighed by its share still inside the last minute), so room
  // for a fourth call can be up to two minutes away: the wait's bound is set past that, or the call would fail
  // rate_limited at once instead of waiting, depending on where in the minute the test runs.
  const limits = { AGENTBUS_RATE_LIMITS: `${RATED}=${LIMIT}rpm`, AGENTBUS_RATE_MAX_WAIT_MS: '180000', AGENTBUS_SPEND_LIMITS: 'acme=1/day', AGENTBUS_MODEL: 'scripted:default' };
  const nodes = NODES.map((node) => startServiceProcess('services/runtime/main.ts', { NATS_URL: server.url, AGENTBUS_NODE_ID: node, AGENTBUS_LEASE_TTL_MS: '1000', ...limits }));
  processes.push(...nodes);
  await Promise.all(nodes.map((node) => node.waitFor('runtime started', 90_000)));
  // Settled: a whole lease TTL since the last node said it takes messages, so a new session goes to its rendezvous
  // node (which sessionsAcrossNodes picks) rather than to whichever node claims it first.
  await new Promise((resolve) => setTimeout(resolve, 2_500));
}, 200_000);

afterAll(async () => {
  await Promise.all(processes.map((process) => process.stop('SIGTERM')));
  await client?.close();
  await server?.stop();
  if (scriptDir) await rm(scriptDir, { recursive: true, force: true });
});

describe('fleet-wide provider limits (two runtime nodes, two provider instances, one bucket)', () => {
  it(`lets ${LIMIT} calls of a model through in a minute across both nodes; the next one waits with a live retry, and one whose deadline comes first fails rate_limited`, async () => {
    const sessions = sessionsAcrossNodes('rates', 'r', LIMIT + 2);
    for (const sessionId of sessions.slice(0, LIMIT)) {
      const events = await ask('rates', sessionId, { text: 'hello', model: RATED });
      expect(ended(events)).toMatchObject({ data: { reason: 'yielded' } });
      expect(events.some((event) => event.type === 'retry')).toBe(false);
    }
    // Both nodes made calls that counted in the one limit.
    const holders = await Promise.all(sessions.slice(0, LIMIT).map((sessionId) => holderOf('rates', sessionId)));
    expect(new Set(holders)).toEqual(new Set(NODES));

    // The next call, on either node, waits: a live `retry` says why and for how long, and no answer comes meanwhile.
    const waiting = sessions[LIMIT]!;
    const events = collectEvents(client, 'rates', waiting);
    expect(await requestJson(client, `agentbus.rates.sessions.${waiting}.prompt`, { text: 'one more', model: RATED }, 15_000)).toMatchObject({ accepted: true });
    await events.until((seen) => seen.some((event) => event.type === 'retry'), 20_000);
    const retry = events.events.find((event) => event.type === 'retry')!;
    expect(retry).toMatchObject({
      data: { model: RATED, delayMs: expect.any(Number), error: { code: 'rate_limited', retryable: true, message: expect.stringContaining(`${RATED} is at its fleet-wide limit of ${LIMIT} requests per minute`) } },
    });
    expect((retry.data as { delayMs: number }).delayMs).toBeGreaterThan(0);
    expect(events.events.some((event) => event.type === 'assistant.message')).toBe(false);
    // A cancel ends the wait at once.
    expect(await requestJson(client, `agentbus.rates.sessions.${waiting}.cancel`, {}, 10_000)).toMatchObject({ ok: true });
    await events.until((seen) => seen.some((event) => event.type === 'turn.ended'), 10_000);
    expect(ended(events.events)).toMatchObject({ data: { reason: 'cancelled' } });
    events.stop();

    // A turn whose deadline comes before the room does fails at once, with a typed error that says so.
    const started = Date.now();
    const late = await ask('rates', sessions[LIMIT + 1]!, { text: 'in a hurry', model: RATED, deadlineMs: 2_000 });
    expect(ended(late)).toMatchObject({ data: { reason: 'failed', error: { code: 'rate_limited', message: expect.stringContaining("past the turn's deadline") } } });
    expect(Date.now() - started).toBeLessThan(2_000 + 5_000);
  }, 90_000);

  it('refuses the prompts of a tenant past its daily spend on either node, with the limit and its reset; another tenant is unaffected', async () => {
    // Three calls of 0.4 USD: the third is let through at 0.8 spent (under 1), and brings the day to 1.2.
    const sessions = sessionsAcrossNodes('acme', 'spend', 5);
    for (const sessionId of sessions.slice(0, 3)) expect(ended(await ask('acme', sessionId, { text: 'spend' }))).toMatchObject({ data: { reason: 'yielded', cost: 0.4 } });
    const day = new Date().toISOString().slice(0, 10);
    const stored = await (await new Kvm(client).open('AGENTBUS_LIMITS')).get('spend.acme.day');
    expect(codec.decode(stored!.value)).toMatchObject({ period: day, spent: expect.closeTo(1.2, 6), holds: {} });

    // The next prompt is refused, whichever node holds its session.
    for (const sessionId of sessions.slice(3, 5)) {
      const reply = await requestJson(client, `agentbus.acme.sessions.${sessionId}.prompt`, { text: 'more' }, 15_000);
      expect(reply).toMatchObject({
        accepted: false,
        error: { code: 'spend_limit_exceeded', retryable: false, message: expect.stringMatching(/tenant acme has reached its daily spend limit of 1 USD \(AGENTBUS_SPEND_LIMITS\): 1\.2 USD spent this day; it resets at \d{4}-\d\d-\d\dT00:00:00\.000Z/) },
      });
    }
    // Both nodes refused: the sessions were rendezvous-hashed to each in turn, and neither took a prompt.
    expect(rendezvousOwner(`acme.${sessions[3]}`, NODES)).not.toBe(rendezvousOwner(`acme.${sessions[4]}`, NODES));

    // Another tenant goes on.
    expect(ended(await ask('globex', 'g1', { text: 'hello' }))).toMatchObject({ data: { reason: 'yielded' } });
  }, 90_000);
});
