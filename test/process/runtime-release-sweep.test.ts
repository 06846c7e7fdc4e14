import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { connect } from '@nats-io/transport-node';
import type { NatsConnection } from '@nats-io/nats-core';
import { jetstream } from '@nats-io/jetstream';
import { Kvm } from '@nats-io/kv';
import { createCodec } from '../../src/protocol/index.ts';
import type { LogEvent } from '../../src/protocol/index.ts';
import { msgpackHeaders } from '../../src/bus/request.ts';
import { rendezvousOwner } from '../../services/runtime/node/rendezvous.ts';
import { startProviderService } from '../../services/provider/index.ts';
import { startToolsService } from '../../services/tools/index.ts';
import { startNatsServer } from '../helpers/nats-server.ts';
import type { TestNatsServer } from '../helpers/nats-server.ts';
import { startServiceProcess } from '../helpers/service-process.ts';
import type { ServiceProcess } from '../helpers/service-process.ts';
import { createGateTool } from '../helpers/gate-tool.ts';
import { checkLogs, readLogs } from '../helpers/log-checker.ts';
import { collectEvents, requestJson, silentLogger } from '../helpers/stack.ts';

// A live runtime node gives a session up mid-turn (its writer finds another writer's event in the log), and a
// separate node's periodic sweep adopts it from the release marker and finishes the turn. The giving node stays
// alive the whole time, so nobody finds it dead and reads the whole bucket: only the marker sweep can resume the
// session.

const codec = createCodec();
const TENANT = 'rs';
const SESSION = 'given-up';
const TTL_MS = 2000;
/** The node that adopts: rendezvous hashing makes it the fleet's sweeper beside {@link HOLDER}. */
const SWEEPER = 'node-b';
const HOLDER = Array.from({ length: 20 }, (_, index) => `node-a${index}`).find((node) => rendezvousOwner('orphan-sweep', [node, SWEEPER]) === SWEEPER)!;

let server: TestNatsServer;
let services: NatsConnection;
let client: NatsConnection;
const stops: Array<() => Promise<unknown>> = [];
const gate = createGateTool('hold');

function runtimeNode(nodeId: string): ServiceProcess {
  const node = startServiceProcess('services/runtime/main.ts', { NATS_URL: server.url, AGENTBUS_NODE_ID: nodeId, AGENTBUS_LEASE_TTL_MS: String(TTL_MS) });
  stops.unshift(() => node.stop('SIGKILL'));
  return node;
}

async function holderOf(sessionId: string): Promise<string | undefined> {
  const leases = await new Kvm(client).open('AGENTBUS_LEASES');
  const entry = await leases.get(`${TENANT}.${sessionId}`);
  return entry?.operation === 'PUT' ? (codec.decode(entry.value) as { node: string }).node : undefined;
}

beforeAll(async () => {
  server = await startNatsServer();
  services = await connect({ servers: server.url });
  client = await connect({ servers: server.url });
  const provider = await startProviderService({
    nc: services,
    logger: silentLogger(),
    script: { responses: [{ toolCalls: [{ name: 'hold', args: {} }] }, { text: 'all done' }] },
  });
  const tools = await startToolsService({ nc: services, logger: silentLogger(), extraTools: [gate.tool] });
  stops.push(() => tools.stop(), () => provider.stop());
});

afterAll(async () => {
  gate.open();
  for (const stop of stops) await stop().catch(() => undefined);
  await client?.close();
  await services?.close();
  await server?.stop();
});

describe('a session given up by a live node', () => {
  it("is adopted by another node's marker sweep, which finishes its turn", async () => {
    expect(HOLDER).toBeDefined();
    // The holder alone first, so the session is surely its own.
    const holder = runtimeNode(HOLDER);
    await holder.waitFor('runtime started');
    const events = collectEvents(client, TENANT, SESSION);
    expect(await requestJson(client, `agentbus.${TENANT}.sessions.${SESSION}.prompt`, { text: 'go' })).toMatchObject({ accepted: true });
    await expect.poll(() => gate.effects.length, { timeout: 20_000 }).toBe(1);
    expect(await holderOf(SESSION)).toBe(HOLDER);

    // The adopter joins; past a few TTLs the fleet is settled, and only it sweeps (its start-time read of every
    // lease is long done, and found nothing to adopt: the holder is alive).
    const adopter = runtimeNode(SWEEPER);
    await adopter.waitFor('runtime started');
    await new Promise((resolve) => setTimeout(resolve, 3 * TTL_MS));

    // Another writer logs the result of the call the holder is running: a valid event of the session, not the
    // holder's. Its own result, once the gate opens, is refused (the log moved past what it expects), so is the
    // turn's end, and the holder gives the session up, released with work left, and marked so.
    const log = (await readLogs(client, TENANT, [SESSION]))[0]!;
    const use = log.find((event): event is Extract<LogEvent, { type: 'tool.use' }> => event.type === 'tool.use')!;
    expect(use.data.name).toBe('hold');
    const foreign: LogEvent = {
      v: 1,
      id: `foreign-${Date.now()}`,
      type: 'tool.result',
      tenant: TENANT,
      sessionId: SESSION,
      turnId: use.turnId!,
      step: use.step!,
      ts: Date.now(),
      data: { toolCallId: use.data.toolCallId, name: 'hold', output: 'released elsewhere', isError: false, durationMs: 1 },
    };
    await jetstream(client).publish(`agentbus.${TENANT}.sessions.${SESSION}.log`, codec.encode(foreign), { headers: msgpackHeaders() });
    gate.open();
    await holder.waitFor('session given up on this node', 20_000);

    // Nothing else is sent to the session: the adopter's sweep finds the marker, claims the lease and resumes the
    // turn, whose call has its result already; the next step answers.
    await adopter.waitFor('resuming a session another node left', 20_000);
    await events.until((seen) => seen.some((event) => event.type === 'turn.ended'), 20_000);
    expect(events.events.find((event) => event.type === 'turn.ended')).toMatchObject({ data: { reason: 'yielded', text: 'all done' } });
    expect(await holderOf(SESSION)).toBe(SWEEPER);
    // The holder never left the fleet, nor took the session back.
    expect(holder.output()).not.toContain('resuming a session another node left');
    const after = await readLogs(client, TENANT, [SESSION]);
    expect(checkLogs(after)).toMatchObject({ promptsWithoutOneEnd: 0, duplicateIds: 0, toolUsesWithoutOneResult: 0, stepGaps: 0 });
    expect(after[0]!.filter((event) => event.type === 'tool.result').map((event) => event.id)).toEqual([foreign.id]);
    events.stop();
  }, 120_000);
});
