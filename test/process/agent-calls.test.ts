import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { mkdtemp, rm, writeFile } from 'node:fs/promises';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { connect } from '@nats-io/transport-node';
import type { NatsConnection } from '@nats-io/nats-core';
import type { AgentEvent } from '../../src/protocol/index.ts';
import { childSessionId } from '../../services/runtime/agents/agent-tools.ts';
import { startNatsServer } from '../helpers/nats-server.ts';
import type { TestNatsServer } from '../helpers/nats-server.ts';
import { startServiceProcess } from '../helpers/service-process.ts';
import type { ServiceProcess } from '../helpers/service-process.ts';
import { collectEvents, requestJson } from '../helpers/stack.ts';
import { Kvm } from '@nats-io/kv';
import { jetstream } from '@nats-io/jetstream';
import { createSessionLog } from '../../src/bus/session-log.ts';
import { createCodec, createSubjects } from '../../src/protocol/index.ts';

const codec = createCodec();

/** A session's whole log, read back from the stream. */
async function readLog(sessionId: string): Promise<AgentEvent[]> {
  const log = createSessionLog({ nc: client, js: jetstream(client), subjects: createSubjects('agentbus'), codec, stream: 'AGENTBUS_LOG' });
  return (await log.read('acme', sessionId)).events as AgentEvent[];
}

// Agents calling agents with every part a real process: a real nats-server, two runtime nodes and the scripted
// provider, whose script gives each model its own answers (`models`): the calling sessions run as `scripted:boss…`,
// the profiles `researcher`, `slow` and `writer` on models of their own. A child session is prompted on the bus, so
// either node may run it.

const PROFILES = {
  profiles: [
    { tenant: 'acme', name: 'researcher', description: 'Finds facts.', systemPrompt: 'You research.', model: 'scripted:researcher', tools: [], maxSteps: 5, maxCost: 1 },
    { tenant: 'acme', name: 'slow', description: 'Takes its time.', model: 'scripted:slow', tools: [] },
    { tenant: 'acme', name: 'slowfail', description: 'Outlives its caller.', model: 'scripted:slowfail', tools: [] },
    { tenant: 'acme', name: 'writer', description: 'Writes the answer.', systemPrompt: 'You write.', model: 'scripted:writer', tools: [] },
  ],
};

const SCRIPT = {
  responses: [{ text: 'default answer' }],
  models: {
    boss: [{ toolCalls: [{ name: 'agent__researcher', args: { task: 'What is the answer?' } }], cost: 0.01 }, { text: 'The boss relays: 42.' }],
    researcher: [{ text: 'The answer is 42.', cost: 0.02 }],
    bossslow: [{ toolCalls: [{ name: 'agent__slow', args: { task: 'Take your time.' } }] }, { text: 'never reached' }],
    slow: [{ text: 'one two three four five six seven eight nine ten eleven twelve', chunkSize: 4, delayMs: 1500 }],
    bossbudget: [{ toolCalls: [{ name: 'agent__researcher', args: { task: 'Costly research.' } }], cost: 0.04 }, { text: 'never reached' }],
    bossfail: [{ toolCalls: [{ name: 'agent__slowfail', args: { task: 'Outlive your caller.' } }] }, { text: 'Collected after the failover.' }],
    bossdrain: [{ toolCalls: [{ name: 'agent__slowfail', args: { task: 'Outlive a drain.' } }] }, { text: 'Collected after the drain.' }],
    slowfail: [{ text: 'a b c d e f g h i j k l m n o p', chunkSize: 2, delayMs: 700 }],
    front: [{ toolCalls: [{ name: 'handoff__writer', args: { reason: 'writing is its job' } }] }, { text: 'front again' }],
    writer: [{ text: 'The writer answers.' }],
  },
};

let server: TestNatsServer;
let client: NatsConnection;
let dir: string;
const processes: ServiceProcess[] = [];
const nodesById = new Map<string, ServiceProcess>();

type Collected = ReturnType<typeof collectEvents>;
const of = (events: readonly AgentEvent[], sessionId: string, type: string) => events.filter((event) => event.sessionId === sessionId && event.type === type);

/** Every event of acme's sessions from now on (children included). */
function watchAcme(): Collected {
  return collectEvents(client, 'acme', '*');
}

beforeAll(async () => {
  server = await startNatsServer();
  client = await connect({ servers: server.url });
  dir = await mkdtemp(join(tmpdir(), 'agentbus-agents-'));
  const script = join(dir, 'script.json');
  await writeFile(script, JSON.stringify(SCRIPT));
  const provider = startServiceProcess('services/provider/main.ts', { NATS_URL: server.url, AGENTBUS_SCRIPT: script });
  processes.push(provider);
  await provider.waitFor('provider service started', 90_000);
  const nodes = ['agents-a', 'agents-b', 'agents-c'].map((node) => {
    const started = startServiceProcess('services/runtime/main.ts', {
      NATS_URL: server.url,
      AGENTBUS_NODE_ID: node,
      AGENTBUS_MODEL: 'scripted:default',
      AGENTBUS_PROFILES: JSON.stringify(PROFILES),
      AGENTBUS_LEASE_TTL_MS: '3000',
    });
    nodesById.set(node, started);
    return started;
  });
  processes.push(...nodes);
  await Promise.all(nodes.map((node) => node.waitFor('runtime started', 90_000)));
}, 200_000);

afterAll(async () => {
  await Promise.all(processes.map((process) => process.stop('SIGTERM')));
  await client?.close();
  await server?.stop();
  if (dir) await rm(dir, { recursive: true, force: true });
});

describe('agents calling agents (two runtime nodes, the scripted provider)', () => {
  it("runs agent__researcher as a child session linked to its caller; the child's answer is the tool's result and its cost the caller's", async () => {
    const events = watchAcme();
    try {
      expect(await requestJson(client, 'agentbus.acme.sessions.boss-1.prompt', { text: 'Find the answer.', model: 'scripted:boss' }, 15_000)).toMatchObject({ accepted: true });
      await events.until((seen) => of(seen, 'boss-1', 'turn.ended').length > 0, 30_000);
      const use = of(events.events, 'boss-1', 'tool.use')[0]!;
      const child = childSessionId((use.data as { effectId: string }).effectId);
      expect(use.data).toMatchObject({ name: 'agent__researcher', childSessionId: child });
      const result = of(events.events, 'boss-1', 'tool.result')[0]!;
      expect(result.data).toMatchObject({ name: 'agent__researcher', output: 'The answer is 42.', isError: false, child: { sessionId: child }, cost: 0.02 });
      const created = of(events.events, child, 'session.created')[0]!;
      expect(created.data).toMatchObject({ parent: { sessionId: 'boss-1', turnId: use.turnId, toolCallId: (use.data as { toolCallId: string }).toolCallId } });
      expect(of(events.events, child, 'user.message')[0]!.data).toMatchObject({ text: 'What is the answer?', profile: 'researcher' });
      expect(of(events.events, child, 'turn.started')[0]!.data).toMatchObject({ model: 'scripted:researcher', maxSteps: 5, maxCost: 1 });
      const ended = of(events.events, 'boss-1', 'turn.ended')[0]!;
      expect(ended.data).toMatchObject({ reason: 'yielded', text: 'The boss relays: 42.' });
      expect((ended.data as { cost: number }).cost).toBeCloseTo(0.03, 10);
    } finally {
      events.stop();
    }
  });

  it("cancels the child's turn when the calling turn is cancelled", async () => {
    const events = watchAcme();
    try {
      expect(await requestJson(client, 'agentbus.acme.sessions.boss-2.prompt', { text: 'Go slowly.', model: 'scripted:bossslow' }, 15_000)).toMatchObject({ accepted: true });
      await events.until((seen) => seen.some((event) => event.type === 'assistant.delta' && event.sessionId !== 'boss-2'), 30_000);
      const child = childSessionId((of(events.events, 'boss-2', 'tool.use')[0]!.data as { effectId: string }).effectId);
      expect(await requestJson(client, 'agentbus.acme.sessions.boss-2.cancel', {}, 10_000)).toMatchObject({ ok: true });
      await events.until((seen) => of(seen, child, 'turn.ended').length > 0 && of(seen, 'boss-2', 'turn.ended').length > 0, 30_000);
      expect(of(events.events, 'boss-2', 'turn.ended')[0]!.data).toMatchObject({ reason: 'cancelled' });
      expect(of(events.events, child, 'turn.ended')[0]!.data).toMatchObject({ reason: 'cancelled' });
      expect(of(events.events, 'boss-2', 'tool.result')[0]!.data).toMatchObject({ isError: true, error: { code: 'cancelled' } });
    } finally {
      events.stop();
    }
  });

  it("caps the child's budgets by what the caller has left, and counts the child's cost in the caller's turn", async () => {
    const events = watchAcme();
    try {
      const body = { text: 'Research within budget.', model: 'scripted:bossbudget', maxCost: 0.05, maxSteps: 3 };
      expect(await requestJson(client, 'agentbus.acme.sessions.boss-3.prompt', body, 15_000)).toMatchObject({ accepted: true });
      await events.until((seen) => of(seen, 'boss-3', 'turn.ended').length > 0, 30_000);
      const child = childSessionId((of(events.events, 'boss-3', 'tool.use')[0]!.data as { effectId: string }).effectId);
      const started = of(events.events, child, 'turn.started')[0]!.data as { maxCost: number; maxSteps: number; deadline: number };
      expect(started.maxSteps).toBe(3);
      expect(started.maxCost).toBeCloseTo(0.01, 10);
      const parentDeadline = (of(events.events, 'boss-3', 'turn.started')[0]!.data as { deadline: number }).deadline;
      expect(started.deadline).toBeLessThanOrEqual(parentDeadline);
      // The child spent 0.02 of its 0.01: it ended over budget, the caller's result says so, and the caller (0.04 +
      // 0.02 of 0.05) is over its own.
      expect(of(events.events, child, 'turn.ended')[0]!.data).toMatchObject({ reason: 'budget_exceeded' });
      expect(of(events.events, 'boss-3', 'tool.result')[0]!.data).toMatchObject({ isError: true, error: { code: 'budget_exceeded' }, cost: 0.02 });
      const ended = of(events.events, 'boss-3', 'turn.ended')[0]!.data as { reason: string; cost: number };
      expect(ended.reason).toBe('budget_exceeded');
      expect(ended.cost).toBeCloseTo(0.06, 10);
    } finally {
      events.stop();
    }
  });

  it("hands the rest of a turn to another profile: turn.handoff is logged and the next step runs on the writer's model", async () => {
    const events = watchAcme();
    try {
      expect(await requestJson(client, 'agentbus.acme.sessions.front-1.prompt', { text: 'Write me something.', model: 'scripted:front' }, 15_000)).toMatchObject({ accepted: true });
      await events.until((seen) => of(seen, 'front-1', 'turn.ended').length > 0, 30_000);
      expect(of(events.events, 'front-1', 'turn.handoff')[0]!.data).toMatchObject({ to: 'writer' });
      const answers = of(events.events, 'front-1', 'assistant.message').map((event) => (event.data as { model: string }).model);
      expect(answers).toEqual(['scripted:front', 'scripted:writer']);
      expect(of(events.events, 'front-1', 'turn.ended')[0]!.data).toMatchObject({ reason: 'yielded', text: 'The writer answers.' });
    } finally {
      events.stop();
    }
  });

  it("refuses another tenant's profile: a prompt naming it is refused, and its sessions are not offered its tools", async () => {
    const refused = await requestJson(client, 'agentbus.globex.sessions.g-1.prompt', { text: 'Use acme research.', profile: 'researcher' }, 15_000);
    expect(refused).toMatchObject({ accepted: false, error: { code: 'invalid_input' } });
    const events = collectEvents(client, 'globex', 'g-2');
    try {
      expect(await requestJson(client, 'agentbus.globex.sessions.g-2.prompt', { text: 'Call it anyway.', model: 'scripted:boss' }, 15_000)).toMatchObject({ accepted: true });
      await events.until((seen) => seen.some((event) => event.type === 'turn.ended'), 30_000);
      const result = events.events.find((event) => event.type === 'tool.result')!;
      expect(result.data).toMatchObject({ name: 'agent__researcher', isError: true, error: { code: 'unknown_tool' } });
    } finally {
      events.stop();
    }
  });

  it("prepares a profile's turn with its system prompt, model and tools allow-list, and offers a plain session the tenant's agent tools", async () => {
    const events = watchAcme();
    try {
      expect(await requestJson(client, 'agentbus.acme.sessions.dry-1.prompt', { text: 'Plan it.', profile: 'researcher', dryRun: true }, 15_000)).toMatchObject({ accepted: true });
      expect(await requestJson(client, 'agentbus.acme.sessions.dry-2.prompt', { text: 'Plan it.', dryRun: true }, 15_000)).toMatchObject({ accepted: true });
      await events.until((seen) => of(seen, 'dry-1', 'request.prepared').length > 0 && of(seen, 'dry-2', 'request.prepared').length > 0, 20_000);
      const asProfile = of(events.events, 'dry-1', 'request.prepared')[0]!.data as unknown as { model: string; messages: Array<{ role: string; content: string }>; tools: Array<{ name: string }>; maxSteps: number };
      expect(asProfile).toMatchObject({ model: 'scripted:researcher', maxSteps: 5, tools: [] });
      expect(asProfile.messages[0]).toEqual({ role: 'system', content: 'You research.' });
      const plain = of(events.events, 'dry-2', 'request.prepared')[0]!.data as unknown as { tools: Array<{ name: string; parameters: unknown }> };
      expect(plain.tools.map((tool) => tool.name)).toEqual(expect.arrayContaining(['agent__researcher', 'handoff__researcher', 'agent__writer', 'handoff__writer']));
      expect(plain.tools.find((tool) => tool.name === 'agent__researcher')?.parameters).toMatchObject({ required: ['task'] });
    } finally {
      events.stop();
    }
  });

  // The last two stop a node each.
  it("survives the caller's node draining (SIGTERM): the child is not cancelled, and the caller resumed elsewhere collects its answer", async () => {
    const events = watchAcme();
    try {
      expect(await requestJson(client, 'agentbus.acme.sessions.boss-drain.prompt', { text: 'Call a slow agent.', model: 'scripted:bossdrain' }, 15_000)).toMatchObject({ accepted: true });
      await events.until((seen) => seen.some((event) => event.type === 'assistant.delta' && event.sessionId !== 'boss-drain'), 30_000);
      const child = childSessionId((of(events.events, 'boss-drain', 'tool.use')[0]!.data as { effectId: string }).effectId);
      const lease = await (await new Kvm(client).open('AGENTBUS_LEASES')).get('acme.boss-drain');
      const holder = (codec.decode(lease!.value) as { node: string }).node;
      await nodesById.get(holder)!.stop('SIGTERM');
      nodesById.delete(holder);
      await events.until((seen) => of(seen, 'boss-drain', 'turn.ended').length > 0, 60_000);
      expect(of(events.events, 'boss-drain', 'turn.ended')[0]!.data).toMatchObject({ reason: 'yielded', text: 'Collected after the drain.' });
      expect(of(events.events, 'boss-drain', 'tool.result')[0]!.data).toMatchObject({ isError: false, child: { sessionId: child } });
      const childLog = await readLog(child);
      expect(childLog.filter((event) => event.type === 'user.message')).toHaveLength(1);
      expect(childLog.filter((event) => event.type === 'turn.ended').map((event) => (event.data as { reason: string }).reason)).toEqual(['yielded']);
    } finally {
      events.stop();
    }
  }, 90_000);

  it("survives the caller's node dying: the child runs on, and the caller, resumed on the other node, collects the child's answer instead of starting a second child", async () => {
    const events = watchAcme();
    try {
      expect(await requestJson(client, 'agentbus.acme.sessions.boss-fail.prompt', { text: 'Call a slow agent.', model: 'scripted:bossfail' }, 15_000)).toMatchObject({ accepted: true });
      await events.until((seen) => seen.some((event) => event.type === 'assistant.delta' && event.sessionId !== 'boss-fail'), 30_000);
      const child = childSessionId((of(events.events, 'boss-fail', 'tool.use')[0]!.data as { effectId: string }).effectId);
      const lease = await (await new Kvm(client).open('AGENTBUS_LEASES')).get('acme.boss-fail');
      const holder = (codec.decode(lease!.value) as { node: string }).node;
      await nodesById.get(holder)!.stop('SIGKILL');
      await events.until((seen) => of(seen, 'boss-fail', 'turn.ended').length > 0, 60_000);
      expect(of(events.events, 'boss-fail', 'turn.ended')[0]!.data).toMatchObject({ reason: 'yielded', text: 'Collected after the failover.' });
      const results = of(events.events, 'boss-fail', 'tool.result');
      expect(results).toHaveLength(1);
      expect(results[0]!.data).toMatchObject({ name: 'agent__slowfail', isError: false, child: { sessionId: child } });
      // One child turn, prompted once: the resumed caller found it by its effectId.
      const childLog = await readLog(child);
      expect(childLog.filter((event) => event.type === 'user.message')).toHaveLength(1);
      expect(childLog.filter((event) => event.type === 'turn.ended')).toHaveLength(1);
    } finally {
      events.stop();
    }
  }, 90_000);
});
