import fc from 'fast-check';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { headers } from '@nats-io/nats-core';
import type { NatsConnection } from '@nats-io/nats-core';
import { Kvm } from '@nats-io/kv';
import { createCodec } from '../../src/protocol/index.ts';
import { collectEvents, requestJson, startStack } from '../helpers/stack.ts';
import type { TestStack } from '../helpers/stack.ts';
import { fuzzMessage, fuzzToken, hugeMessages } from '../helpers/fuzz-messages.ts';
import type { FuzzMessage } from '../helpers/fuzz-messages.ts';
import { startChaosServices } from '../helpers/chaos-services.ts';
import { connect } from '@nats-io/transport-node';
import { startMemoryService } from '../../services/memory/index.ts';
import type { MemoryService } from '../../services/memory/index.ts';
import { silentLogger } from '../helpers/stack.ts';

const codec = createCodec();
const MESSAGES = 100_000;
/** One message in this many is sent as a request, and its reply checked. */
const REQUEST_EVERY = 40;

const VERBS = ['prompt', 'cancel', 'steer', 'approve', 'delete', 'fork', 'history'] as const;
const SERVICE_SUBJECTS = ['agentbus.provider.scripted.generate', 'agentbus.provider.scripted.cancel', 'agentbus.tools.read_file.call', 'agentbus.tools.list_dir.call', 'agentbus.tools.read_file.cancel'];

const target = fc.oneof(
  { weight: 3, arbitrary: fc.record({ tenant: fuzzToken, session: fc.integer({ min: 0, max: 1_999 }).map((index) => `fuzz-${index}`), verb: fc.constantFrom(...VERBS) }).map(({ tenant, session, verb }) => `agentbus.${tenant}.sessions.${session}.${verb}`) },
  { weight: 2, arbitrary: fc.constantFrom(...SERVICE_SUBJECTS) },
  // Memory's queries, per tenant.
  { weight: 1, arbitrary: fc.record({ tenant: fuzzToken, what: fc.constantFrom('memory.search', 'sessions.list') }).map(({ tenant, what }) => `agentbus.${tenant}.${what}`) },
);

/** What any answer of ours must look like: an error as data, or an acceptance, or a valid first chunk. */
function isTypedAnswer(body: unknown): boolean {
  if (typeof body !== 'object' || body === null) return false;
  const answer = body as { error?: { code?: unknown; message?: unknown; retryable?: unknown }; accepted?: unknown; ok?: unknown; type?: unknown };
  if (answer.error !== undefined) return typeof answer.error.code === 'string' && typeof answer.error.message === 'string' && typeof answer.error.retryable === 'boolean';
  if (answer.accepted === true || answer.ok === true || typeof answer.type === 'string') return true;
  // Memory's answers: hits of a search, a page of sessions or of a session's history.
  const page = body as { hits?: unknown; sessions?: unknown; events?: unknown };
  return Array.isArray(page.hits) || Array.isArray(page.sessions) || Array.isArray(page.events);
}

function send(nc: NatsConnection, subject: string, message: FuzzMessage, reply?: boolean) {
  const messageHeaders = headers();
  if (message.contentType !== undefined) messageHeaders.set('Content-Type', message.contentType);
  if (!reply) {
    nc.publish(subject, message.data, { headers: messageHeaders });
    return undefined;
  }
  return nc.request(subject, message.data, { headers: messageHeaders, timeout: 10_000 });
}

let stack: TestStack;
let memory: MemoryService;
let memoryConnection: NatsConnection;
beforeAll(async () => {
  // No rate limits: the point is that every message is read, decoded and refused on its own merits.
  stack = await startStack({
    script: { responses: [{ text: 'Reading it.', toolCalls: [{ name: 'read_file', args: { path: 'README.md' } }] }, { text: 'ok' }] },
    runtime: { admission: { maxPromptBytes: 0, sessionRate: { perSecond: 0, burst: 0 }, tenantRate: { perSecond: 0, burst: 0 } }, toolTimeoutMs: 2_000, providerIdleTimeoutMs: 2_000 },
  });
  memoryConnection = await connect({ servers: stack.server.url });
  memory = await startMemoryService({ nc: memoryConnection, logger: silentLogger(), snapshots: false });
  await memory.caughtUp;
}, 60_000);
afterAll(async () => {
  await memory?.stop();
  await memoryConnection?.close();
  await stack?.stop();
});

describe('fuzzing every ingress', () => {
  it(`answers ${MESSAGES.toLocaleString('en')} generated messages with typed errors, and a healthy session beside them finishes`, async () => {
    const healthy = collectEvents(stack.client, 'healthy', 'beside');
    const samples = fc.sample(fc.tuple(target, fuzzMessage), { numRuns: MESSAGES, seed: 20261124 });
    const huge = hugeMessages(20);
    const answers: Array<Promise<unknown>> = [];
    let requests = 0;
    let promptAccepted = false;
    let resent = 0;
    for (const [index, [subject, message]] of samples.entries()) {
      if (index === MESSAGES / 2) {
        // Halfway through the flood a healthy session asks for a turn with a tool call.
        promptAccepted = (await requestJson(stack.client, 'agentbus.healthy.sessions.beside.prompt', { text: 'what is in the README?' }, 15_000)).accepted;
      }
      const asRequest = index % REQUEST_EVERY === 0;
      const sent = index % 5_000 === 0 ? huge[(index / 5_000) % huge.length]! : message;
      // A claim the lease bucket does not answer in time may go unanswered when the node cannot tell it was the only
      // one to try (docs/architecture.md, "Ingress modes": send again), which a loaded machine can bring about: a
      // request with no answer is sent once more, as a client would, and those are counted.
      const pending = send(stack.client, subject, sent, asRequest)?.catch(() => {
        resent += 1;
        return send(stack.client, subject, sent, true)!;
      });
      if (pending) {
        requests += 1;
        answers.push(
          pending.then(
            (reply) => {
              const body = codec.decode(reply.data, reply.headers?.get('Content-Type'));
              if (!isTypedAnswer(body)) throw new Error(`untyped answer on ${subject}: ${JSON.stringify(body).slice(0, 300)}`);
              return body;
            },
            (err: unknown) => {
              throw new Error(`no answer on ${subject} (${(err as Error).message}) to ${Buffer.from(message.data.slice(0, 80)).toString('hex')} as ${message.contentType}`);
            },
          ),
        );
      }
      if (index % 500 === 499) {
        await stack.client.flush();
        // Keep the requests in flight bounded, as a client would.
        if (answers.length > 200) await Promise.all(answers.splice(0, answers.length));
      }
    }
    await Promise.all(answers);
    expect(requests).toBeGreaterThanOrEqual(MESSAGES / REQUEST_EVERY);
    // Sending again is the exception: at most 1 request in 100.
    expect(resent).toBeLessThanOrEqual(requests / 100);
    expect(promptAccepted).toBe(true);
    const events = await healthy.until((seen) => seen.some((event) => event.type === 'turn.ended'), 120_000);
    healthy.stop();
    const ended = events.find((event) => event.type === 'turn.ended');
    expect(ended?.type === 'turn.ended' && ended.data.reason).toBe('yielded');
    expect(events.some((event) => event.type === 'tool.result')).toBe(true);

    // Nothing leaks: a session is hosted or leased only where a prompt was accepted.
    const kv = await new Kvm(stack.client).open('AGENTBUS_LEASES');
    const keys: string[] = [];
    for await (const key of await kv.keys()) keys.push(key);
    // Beside the leases, a session given up with work left has its release marker (`released.<tenant>.<sessionId>`).
    const leases = keys.filter((key) => !key.startsWith('released.'));
    expect(keys.filter((key) => !/^(released\.)?(acme|globex|default|healthy)\.[A-Za-z0-9_-]+$/.test(key))).toEqual([]);
    expect(stack.runtime.sessions()).toBeLessThanOrEqual(leases.length);
  }, 600_000);

  it('ends every turn whose provider streams garbage or whose tool worker replies garbage, with a typed error and one turn.ended', async () => {
    const chaos = await startChaosServices(stack.client, { seed: 7 });
    try {
      const sessions = Array.from({ length: 100 }, (_, index) => `chaos-${index}`);
      const watchers = sessions.map((sessionId) => collectEvents(stack.client, 'chaos', sessionId));
      for (const sessionId of sessions) {
        const reply = await requestJson(stack.client, `agentbus.chaos.sessions.${sessionId}.prompt`, { text: 'call the chaos tool', model: 'chaos:any' }, 15_000);
        expect(reply.accepted).toBe(true);
      }
      for (const watcher of watchers) {
        const events = await watcher.until((seen) => seen.some((event) => event.type === 'turn.ended'), 60_000);
        // Give a stray second end a moment to show up.
        await new Promise((resolve) => setTimeout(resolve, 20));
        watcher.stop();
        expect(events.filter((event) => event.type === 'turn.ended')).toHaveLength(1);
        const uses = events.filter((event) => event.type === 'tool.use').length;
        expect(events.filter((event) => event.type === 'tool.result')).toHaveLength(uses);
      }
      expect(chaos.repliesSent()).toBeGreaterThan(500);
    } finally {
      await chaos.stop();
    }
  }, 300_000);
});
