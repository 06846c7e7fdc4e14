import { afterAll, afterEach, beforeAll, describe, expect, it } from 'vitest';
import { connect } from '@nats-io/transport-node';
import type { NatsConnection } from '@nats-io/nats-core';
import { Kvm } from '@nats-io/kv';
import { z } from 'zod';
import { createCodec } from '../../src/protocol/index.ts';
import { defineTool } from '../../src/tool-sdk/index.ts';
import { startProviderService } from '../../services/provider/index.ts';
import { startToolsService } from '../../services/tools/index.ts';
import { startNatsServer } from '../helpers/nats-server.ts';
import type { TestNatsServer } from '../helpers/nats-server.ts';
import { startServiceProcess } from '../helpers/service-process.ts';
import type { ServiceProcess } from '../helpers/service-process.ts';
import { createGateTool } from '../helpers/gate-tool.ts';
import { checkLogs, readLogs } from '../helpers/log-checker.ts';
import { collectEvents, requestJson, silentLogger } from '../helpers/stack.ts';

// Failover as a client sees it, with runtime nodes as real processes: a node is SIGKILLed, SIGSTOPped or
// stopped, and its sessions, idle or running, go on on another node within seconds. A message sent to a
// session while its dead holder is not yet found dead is kept by the other nodes and answered, never dropped.

const codec = createCodec();
const TENANT = 'fo';
let server: TestNatsServer;
let services: NatsConnection;
let client: NatsConnection;
let stopServices: Array<() => Promise<void>> = [];
let gate = createGateTool('hold');
/** effectId → how many times the `bump` tool ran it: a side effect must run once. */
const bumps = new Map<string, number>();
const started: ServiceProcess[] = [];

const bump = defineTool({
  name: 'bump',
  description: 'a side effect that must run once',
  parameters: z.object({}),
  tier: 'side_effecting',
  timeoutMs: 10_000,
  idempotent: false,
  execute: (_args, { effectId }) => {
    bumps.set(effectId, (bumps.get(effectId) ?? 0) + 1);
    return 'bumped';
  },
});

function runtimeNode(nodeId: string, env: Record<string, string> = {}): ServiceProcess {
  const node = startServiceProcess('services/runtime/main.ts', { NATS_URL: server.url, AGENTBUS_NODE_ID: nodeId, ...env });
  started.push(node);
  return node;
}

/** The node holding a session's lease now. */
async function holderOf(sessionId: string): Promise<string | undefined> {
  const leases = await new Kvm(client).open('AGENTBUS_LEASES');
  const entry = await leases.get(`${TENANT}.${sessionId}`);
  return entry?.operation === 'PUT' ? (codec.decode(entry.value) as { node: string }).node : undefined;
}

/** The log checker's counts over these sessions: each must be 0. */
async function check(sessionIds: readonly string[]) {
  const figures = checkLogs(await readLogs(client, TENANT, sessionIds), bumps);
  expect(figures).toMatchObject({ promptsWithoutOneEnd: 0, duplicateIds: 0, toolUsesWithoutOneResult: 0, stepGaps: 0, effectsRunTwice: 0 });
  return figures;
}

beforeAll(async () => {
  server = await startNatsServer();
  services = await connect({ servers: server.url });
  client = await connect({ servers: server.url });
  const provider = await startProviderService({
    nc: services,
    logger: silentLogger(),
    // Each session's calls take the script in order (scripted cursors are per session).
    script: {
      responses: [
        { text: 'first answer' },
        { toolCalls: [{ name: 'bump', args: {} }] },
        { toolCalls: [{ name: 'hold', args: {} }] },
        { text: 'all done' },
      ],
    },
  });
  stopServices = [() => provider.stop()];
});

let stopTools: (() => Promise<void>) | undefined;

afterEach(async () => {
  gate.open();
  for (const node of started.splice(0)) await node.stop('SIGKILL');
  await stopTools?.();
  gate = createGateTool('hold');
});

afterAll(async () => {
  for (const stop of stopServices) await stop().catch(() => undefined);
  await client?.close();
  await services?.close();
  await server?.stop();
});

/** Starts nodes a and b (and the tools worker with a fresh gate), and runs a first turn on `sessionId`. */
async function twoNodesWithSession(sessionId: string, env: Record<string, string> = {}, extraTools = [bump, gate.tool]) {
  // A tools worker for each test: it serves this test's gate.
  const tools = await startToolsService({ nc: services, logger: silentLogger(), extraTools });
  stopTools = () => tools.stop();
  const nodes = { 'node-a': runtimeNode('node-a', env), 'node-b': runtimeNode('node-b', env) };
  await Promise.all(Object.values(nodes).map((node) => node.waitFor('runtime started')));
  const events = collectEvents(client, TENANT, sessionId);
  expect(await requestJson(client, `agentbus.${TENANT}.sessions.${sessionId}.prompt`, { text: 'hello' })).toMatchObject({ accepted: true });
  await events.until((seen) => seen.some((event) => event.type === 'turn.ended'));
  const holder = (await holderOf(sessionId))!;
  expect(Object.keys(nodes)).toContain(holder);
  const other = holder === 'node-a' ? 'node-b' : 'node-a';
  return { events, holder, other, nodes: nodes as Record<string, ServiceProcess> };
}

describe('failover between runtime nodes', () => {
  it('answers a prompt sent 100 ms after its session holder was SIGKILLed, and the turn yields on the other node', async () => {
    const { events, holder, other, nodes } = await twoNodesWithSession('killed-idle');
    gate.open(); // the next turn bumps, holds and answers
    await nodes[holder]!.stop('SIGKILL');
    const killed = Date.now();
    await new Promise((resolve) => setTimeout(resolve, 100));
    // A raw request, as any NATS client sends it: no retry.
    const reply = await requestJson(client, `agentbus.${TENANT}.sessions.killed-idle.prompt`, { text: 'are you still there?' }, 15_000);
    const failoverMs = Date.now() - killed;
    expect(reply).toMatchObject({ accepted: true });
    await events.until((seen) => seen.filter((event) => event.type === 'turn.ended').length === 2, 15_000);
    expect(await holderOf('killed-idle')).toBe(other);
    console.log(`failover: a prompt sent 100 ms after SIGKILL answered after ${failoverMs} ms (lease TTL 2000 ms)`);
    // The default TTL is 2 s: found dead within it (and a beat), then claimed and opened.
    expect(failoverMs).toBeLessThan(4_500);
    const figures = await check(['killed-idle']);
    expect(figures.events).toBeGreaterThanOrEqual(8);
    events.stop();
  }, 60_000);

  it('resumes a running turn on the other node, and answers a cancel sent while the holder was not yet found dead', async () => {
    const { events, holder, nodes } = await twoNodesWithSession('killed-running');
    expect(await requestJson(client, `agentbus.${TENANT}.sessions.killed-running.prompt`, { text: 'bump, then hold' })).toMatchObject({ accepted: true });
    await expect.poll(() => gate.effects.length, { timeout: 10_000 }).toBe(1);
    await nodes[holder]!.stop('SIGKILL');
    const killed = Date.now();
    // The survivor resumes the turn: the hold call runs again (same effectId), bump does not.
    await expect.poll(() => gate.effects.length, { timeout: 10_000 }).toBe(2);
    const resumedMs = Date.now() - killed;
    console.log(`failover: a running turn resumed ${resumedMs} ms after its node was SIGKILLed`);
    expect(resumedMs).toBeLessThan(4_500);
    expect(new Set(gate.effects).size).toBe(1);
    const cancel = await requestJson(client, `agentbus.${TENANT}.sessions.killed-running.cancel`, {}, 10_000);
    expect(cancel).toMatchObject({ ok: true });
    await events.until((seen) => seen.filter((event) => event.type === 'turn.ended').length === 2, 10_000);
    expect(events.events.filter((event) => event.type === 'turn.ended').at(-1)).toMatchObject({ data: { reason: 'cancelled' } });
    await check(['killed-running']);
    events.stop();
  }, 60_000);

  it('keeps a cancel sent 100 ms after the SIGKILL and delivers it to the node that takes the session', async () => {
    const { events, holder, nodes } = await twoNodesWithSession('cancel-kept');
    expect(await requestJson(client, `agentbus.${TENANT}.sessions.cancel-kept.prompt`, { text: 'bump, then hold' })).toMatchObject({ accepted: true });
    await expect.poll(() => gate.effects.length, { timeout: 10_000 }).toBe(1);
    await nodes[holder]!.stop('SIGKILL');
    await new Promise((resolve) => setTimeout(resolve, 100));
    const cancel = await requestJson(client, `agentbus.${TENANT}.sessions.cancel-kept.cancel`, { reason: 'changed my mind' }, 15_000);
    expect(cancel).toMatchObject({ ok: true });
    await events.until((seen) => seen.filter((event) => event.type === 'turn.ended').length === 2, 15_000);
    expect(events.events.filter((event) => event.type === 'turn.ended').at(-1)).toMatchObject({ data: { reason: 'cancelled' } });
    await check(['cancel-kept']);
    events.stop();
  }, 60_000);

  it('does not run a side effect twice: a non-idempotent call running when its node died ends interrupted, and the turn goes on', async () => {
    // Here `bump` blocks until opened, and is not idempotent.
    const bumpGate = createGateTool('bump', { idempotent: false });
    gate.open();
    const { events, holder, nodes } = await twoNodesWithSession('interrupted', {}, [bumpGate.tool, gate.tool]);
    expect(await requestJson(client, `agentbus.${TENANT}.sessions.interrupted.prompt`, { text: 'bump, then hold' })).toMatchObject({ accepted: true });
    await expect.poll(() => bumpGate.effects.length, { timeout: 10_000 }).toBe(1);
    await nodes[holder]!.stop('SIGKILL');
    await events.until((seen) => seen.filter((event) => event.type === 'turn.ended').length === 2, 15_000);
    bumpGate.open();
    expect(bumpGate.effects).toHaveLength(1);
    const result = events.events.find((event) => event.type === 'tool.result' && event.data.name === 'bump');
    expect(result).toMatchObject({ data: { isError: true, error: { code: 'interrupted' } } });
    expect(events.events.filter((event) => event.type === 'turn.ended').at(-1)).toMatchObject({ data: { reason: 'yielded', text: 'all done' } });
    await check(['interrupted']);
    events.stop();
  }, 60_000);

  it('does not run a side effect again whose node died after it ran, before its result was logged: the resumed turn gets the recorded outcome', async () => {
    gate.open();
    let killHolder: (() => Promise<void>) | undefined;
    const runs = new Map<string, number>();
    // `bump` again, not idempotent: its worker records the outcome in the result ledger before it replies. The
    // first run kills the node that called it and answers a moment later, to a node that is gone.
    const killingBump = defineTool({
      name: 'bump',
      description: 'a side effect that must run once',
      parameters: z.object({}),
      tier: 'side_effecting',
      timeoutMs: 10_000,
      idempotent: false,
      execute: async (_args, { effectId }) => {
        runs.set(effectId, (runs.get(effectId) ?? 0) + 1);
        bumps.set(effectId, (bumps.get(effectId) ?? 0) + 1);
        const kill = killHolder;
        killHolder = undefined;
        await kill?.();
        await new Promise((resolve) => setTimeout(resolve, 300));
        return `bumped ${effectId}`;
      },
    });
    const { events, holder, other, nodes } = await twoNodesWithSession('recorded', {}, [killingBump, gate.tool]);
    killHolder = () => nodes[holder]!.stop('SIGKILL').then(() => undefined);
    expect(await requestJson(client, `agentbus.${TENANT}.sessions.recorded.prompt`, { text: 'bump once' })).toMatchObject({ accepted: true });
    await events.until((seen) => seen.filter((event) => event.type === 'turn.ended').length === 2, 20_000);
    expect(await holderOf('recorded')).toBe(other);
    // The counter in the tool: one run, though the call was made twice (the second a repeat from the ledger).
    expect([...runs.values()]).toEqual([1]);
    const [effectId] = [...runs.keys()];
    const uses = events.events.filter((event) => event.type === 'tool.use' && event.data.name === 'bump');
    expect(uses.length).toBeGreaterThanOrEqual(2);
    const results = events.events.filter((event) => event.type === 'tool.result' && event.data.name === 'bump');
    expect(results).toHaveLength(1);
    expect(results[0]).toMatchObject({ data: { isError: false, output: `bumped ${effectId}` } });
    expect(events.events.filter((event) => event.type === 'turn.ended').at(-1)).toMatchObject({ data: { reason: 'yielded', text: 'all done' } });
    await check(['recorded']);
    events.stop();
  }, 60_000);

  it('takes the sessions of a node paused past its TTL, and the paused node gives them up when it wakes: one writer, one end', async () => {
    const { events, holder, other, nodes } = await twoNodesWithSession('paused');
    expect(await requestJson(client, `agentbus.${TENANT}.sessions.paused.prompt`, { text: 'bump, then hold' })).toMatchObject({ accepted: true });
    await expect.poll(() => gate.effects.length, { timeout: 10_000 }).toBe(1);
    nodes[holder]!.child.kill('SIGSTOP');
    await expect.poll(() => holderOf('paused'), { timeout: 10_000, interval: 100 }).toBe(other);
    await expect.poll(() => gate.effects.length, { timeout: 10_000 }).toBe(2);
    nodes[holder]!.child.kill('SIGCONT');
    await nodes[holder]!.waitFor('lease lost while this node was silent', 10_000);
    gate.open();
    await events.until((seen) => seen.filter((event) => event.type === 'turn.ended').length === 2, 15_000);
    // The woken node wrote nothing more: the one end is the taker's, and the log is whole.
    await new Promise((resolve) => setTimeout(resolve, 500));
    expect(events.events.filter((event) => event.type === 'turn.ended')).toHaveLength(2);
    expect(events.events.filter((event) => event.type === 'turn.ended').at(-1)).toMatchObject({ data: { reason: 'yielded', text: 'all done' } });
    await check(['paused']);
    expect(await holderOf('paused')).toBe(other);
    events.stop();
  }, 60_000);

  it('hands sessions over at once when their node stops gracefully, and a restarted node with the same id takes its own back at once', async () => {
    // A long TTL: what happens here must not wait for it.
    const { events, holder, other, nodes } = await twoNodesWithSession('graceful', { AGENTBUS_LEASE_TTL_MS: '15000' });
    const stopping = Date.now();
    expect(await nodes[holder]!.stop('SIGTERM')).toBe(0);
    // This turn bumps, then holds at the gate.
    const reply = await requestJson(client, `agentbus.${TENANT}.sessions.graceful.prompt`, { text: 'still there?' }, 10_000);
    expect(reply).toMatchObject({ accepted: true });
    const handoverMs = Date.now() - stopping;
    console.log(`handover: a prompt answered ${handoverMs} ms after its node was sent SIGTERM (TTL 15 s)`);
    expect(handoverMs).toBeLessThan(7_500);
    expect(await holderOf('graceful')).toBe(other);
    await expect.poll(() => gate.effects.length, { timeout: 10_000 }).toBe(1);

    // The session's new holder crashes mid-turn and comes back under its own id: it resumes the turn at once,
    // long before the others could find it dead.
    await nodes[other]!.stop('SIGKILL');
    const crashed = Date.now();
    const again = runtimeNode(other, { AGENTBUS_LEASE_TTL_MS: '15000' });
    await expect.poll(() => gate.effects.length, { timeout: 12_000 }).toBe(2);
    console.log(`restart: the same node id resumed its turn ${Date.now() - crashed} ms after its SIGKILL (TTL 15 s)`);
    expect(await holderOf('graceful')).toBe(other);
    gate.open();
    await events.until((seen) => seen.filter((event) => event.type === 'turn.ended').length === 2, 10_000);
    expect(events.events.filter((event) => event.type === 'turn.ended').at(-1)).toMatchObject({ data: { reason: 'yielded', text: 'all done' } });
    await again.stop('SIGTERM');
    await check(['graceful']);
    events.stop();
  }, 60_000);
});
