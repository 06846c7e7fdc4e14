import { afterAll, afterEach, beforeAll, describe, expect, it } from 'vitest';
import { connect } from '@nats-io/transport-node';
import type { NatsConnection } from '@nats-io/nats-core';
import { Kvm } from '@nats-io/kv';
import { z } from 'zod';
import { createCodec } from '../../src/protocol/index.ts';
import type { AgentEvent } from '../../src/protocol/index.ts';
import { defineTool } from '../../src/tool-sdk/index.ts';
import { startProviderService } from '../../services/provider/index.ts';
import { startToolsService } from '../../services/tools/index.ts';
import { startNatsServer } from '../helpers/nats-server.ts';
import type { TestNatsServer } from '../helpers/nats-server.ts';
import { startServiceProcess } from '../helpers/service-process.ts';
import type { ServiceProcess } from '../helpers/service-process.ts';
import { checkLogs, readLogs } from '../helpers/log-checker.ts';
import { collectEvents, requestJson, silentLogger } from '../helpers/stack.ts';
import { createPickBranchTool } from '../helpers/pick-branch-tool.ts';
import { PassThrough } from 'node:stream';
import { main } from '../../cli/main.ts';

/** Runs the `agentbus` CLI in this process against the test's server: its exit code and output. */
async function cli(...argv: string[]): Promise<{ code: number; stdout: string; stderr: string }> {
  const stdout = new PassThrough();
  const stderr = new PassThrough();
  const out: string[] = [];
  const err: string[] = [];
  stdout.on('data', (chunk: Buffer) => out.push(chunk.toString()));
  stderr.on('data', (chunk: Buffer) => err.push(chunk.toString()));
  const code = await main([...argv, '--nats', server.url, '--tenant', TENANT], {
    stdout,
    stderr,
    env: { PATH: process.env.PATH ?? '' },
    cwd: process.cwd(),
    stateDir: '/nonexistent-agentbus-state',
    signal: new AbortController().signal,
  });
  return { code, stdout: out.join(''), stderr: err.join('') };
}

// Richer interrupts as a client sees them, with runtime nodes as real processes: an approval that edits the call's
// arguments or answers in the tool's place, an approval deadline kept across a SIGKILL, and a tool that asks the user
// something, whose question is still answered after the node that asked it was SIGKILLed.

const codec = createCodec();
const TENANT = 'hi';
const APPROVAL_TIMEOUT_MS = 6_000;
let server: TestNatsServer;
let services: NatsConnection;
let client: NatsConnection;
const stops: Array<() => Promise<void>> = [];
const started: ServiceProcess[] = [];
/** effectId → how many times a side effect ran: each must run once. */
const effects = new Map<string, number>();
/** Targets `deploy` ran for. */
const deployed: string[] = [];

const deploy = defineTool({
  name: 'deploy',
  description: 'deploys to a target',
  parameters: z.object({ target: z.enum(['prod', 'staging']) }),
  tier: 'privileged',
  timeoutMs: 10_000,
  idempotent: false,
  execute: ({ target }, { effectId }) => {
    effects.set(effectId, (effects.get(effectId) ?? 0) + 1);
    deployed.push(target);
    return `deployed to ${target}`;
  },
});

/** `pick_branch`, and the answers each of its runs was given; each release counts as a side effect. */
const { tool: pickBranch, runs: askRuns } = createPickBranchTool({ onReleased: (effectId) => effects.set(effectId, (effects.get(effectId) ?? 0) + 1) });

function runtimeNode(nodeId: string): ServiceProcess {
  const node = startServiceProcess('services/runtime/main.ts', {
    NATS_URL: server.url,
    AGENTBUS_NODE_ID: nodeId,
    AGENTBUS_APPROVAL_TIMEOUT_MS: String(APPROVAL_TIMEOUT_MS),
  });
  started.push(node);
  return node;
}

async function holderOf(sessionId: string): Promise<string | undefined> {
  const leases = await new Kvm(client).open('AGENTBUS_LEASES');
  const entry = await leases.get(`${TENANT}.${sessionId}`);
  return entry?.operation === 'PUT' ? (codec.decode(entry.value) as { node: string }).node : undefined;
}

/** Sends a session verb until a node answers (one may be taking the session over): the reply. */
async function command(sessionId: string, verb: string, body: unknown): Promise<Record<string, unknown>> {
  return (await requestJson(client, `agentbus.${TENANT}.sessions.${sessionId}.${verb}`, body, 15_000)) as unknown as Record<string, unknown>;
}

function ofType<T extends AgentEvent['type']>(events: readonly AgentEvent[], type: T): Array<Extract<AgentEvent, { type: T }>> {
  return events.filter((event): event is Extract<AgentEvent, { type: T }> => event.type === type);
}

async function check(sessionIds: readonly string[]) {
  const figures = checkLogs(await readLogs(client, TENANT, sessionIds), effects);
  expect(figures).toMatchObject({ promptsWithoutOneEnd: 0, duplicateIds: 0, toolUsesWithoutOneResult: 0, stepGaps: 0, effectsRunTwice: 0 });
}

beforeAll(async () => {
  server = await startNatsServer();
  services = await connect({ servers: server.url });
  client = await connect({ servers: server.url });
  const provider = await startProviderService({ nc: services, logger: silentLogger(), script: { responses: [{ text: 'all done' }] } });
  const tools = await startToolsService({ nc: services, logger: silentLogger(), extraTools: [deploy, pickBranch] });
  stops.push(() => tools.stop(), () => provider.stop());
});

afterEach(async () => {
  for (const node of started.splice(0)) await node.stop('SIGKILL');
});

afterAll(async () => {
  for (const stop of stops) await stop().catch(() => undefined);
  await client?.close();
  await services?.close();
  await server?.stop();
});

/** Starts two nodes and prompts `sessionId` with a forced call of `tool`; resolves once `until` holds. */
async function forcedCall(sessionId: string, tool: string, args: Record<string, unknown>, until: (events: AgentEvent[]) => boolean) {
  const nodes: Record<string, ServiceProcess> = { 'node-a': runtimeNode('node-a'), 'node-b': runtimeNode('node-b') };
  await Promise.all(Object.values(nodes).map((node) => node.waitFor('runtime started')));
  const events = collectEvents(client, TENANT, sessionId);
  expect(await command(sessionId, 'prompt', { text: `please ${tool}`, forceTool: { name: tool, args } })).toMatchObject({ accepted: true });
  await events.until(until, 15_000);
  return { events, nodes };
}

describe('richer interrupts', () => {
  it('refuses edited arguments that break the tool schema (the approval stays open), then runs the call with valid edited ones', async () => {
    const { events } = await forcedCall('edit', 'deploy', { target: 'prod' }, (seen) => ofType(seen, 'approval.requested').length === 1);
    const [requested] = ofType(events.events, 'approval.requested');
    expect(requested!.data).toMatchObject({ name: 'deploy', args: { target: 'prod' }, onTimeout: 'deny', deadline: expect.any(Number) });
    const toolCallId = requested!.data.toolCallId;

    const bad = await command('edit', 'approve', { toolCallId, approved: true, args: { target: 'moon' } });
    expect(bad).toMatchObject({ ok: false, error: { code: 'invalid_arguments' } });
    expect(String((bad.error as { message: string }).message)).toContain('target');
    // The CLI says so too, and exits 1; the approval is still open.
    const badCli = await cli('approve', 'edit', toolCallId, '--args', '{"target":"mars"}');
    expect(badCli.code).toBe(1);
    expect(badCli.stderr).toContain('invalid_arguments');
    // Malformed on the wire: args without approved: true.
    expect(await command('edit', 'approve', { toolCallId, approved: false, args: { target: 'staging' } })).toMatchObject({ ok: false, error: { code: 'invalid_input' } });

    expect(await command('edit', 'approve', { toolCallId, approved: true, args: { target: 'staging' } })).toMatchObject({ ok: true });
    await events.until((seen) => ofType(seen, 'turn.ended').length === 1, 15_000);
    expect(deployed).toEqual(['staging']);
    expect(ofType(events.events, 'approval.decided').map((event) => event.data)).toEqual([{ toolCallId, approved: true, args: { target: 'staging' } }]);
    // The model's arguments stay in its message and the request; the call went out with the edited ones.
    expect(ofType(events.events, 'assistant.message')[0]!.data.toolCalls[0]!.args).toEqual({ target: 'prod' });
    expect(ofType(events.events, 'tool.use')[0]!.data.args).toEqual({ target: 'staging' });
    expect(ofType(events.events, 'tool.result')[0]!.data).toMatchObject({ isError: false, output: 'deployed to staging' });
    await check(['edit']);
    events.stop();
  }, 60_000);

  it('answers a call in the tool\'s place with respond: the text is its result, and the tool does not run', async () => {
    const before = deployed.length;
    const { events } = await forcedCall('respond', 'deploy', { target: 'prod' }, (seen) => ofType(seen, 'approval.requested').length === 1);
    const toolCallId = ofType(events.events, 'approval.requested')[0]!.data.toolCallId;
    // Through the CLI: `agentbus approve <session> <toolCallId> --respond TEXT`.
    const unknown = await cli('approve', 'respond', 'no-such-call', '--deny');
    expect(unknown.code).toBe(1);
    expect(unknown.stderr).toContain('not_found');
    expect(await cli('approve', 'respond', toolCallId, '--respond', 'Deployed by hand at 10:00.')).toMatchObject({ code: 0, stdout: expect.stringContaining('ok') });
    await events.until((seen) => ofType(seen, 'turn.ended').length === 1, 15_000);
    expect(deployed.length).toBe(before);
    expect(ofType(events.events, 'approval.decided')[0]!.data).toEqual({ toolCallId, approved: false, respond: 'Deployed by hand at 10:00.' });
    expect(ofType(events.events, 'tool.result')[0]!.data).toMatchObject({ isError: false, output: 'Deployed by hand at 10:00.' });
    expect(ofType(events.events, 'turn.ended')[0]!.data.reason).toBe('yielded');
    await check(['respond']);
    events.stop();
  }, 60_000);

  it('keeps an approval deadline across a SIGKILL: the node that takes the session over logs the default decision at the original deadline', async () => {
    const before = deployed.length;
    const { events, nodes } = await forcedCall('deadline', 'deploy', { target: 'prod' }, (seen) => ofType(seen, 'approval.requested').length === 1);
    const requested = ofType(events.events, 'approval.requested')[0]!;
    const holder = (await holderOf('deadline'))!;
    await new Promise((resolve) => setTimeout(resolve, 1_000));
    await nodes[holder]!.stop('SIGKILL');
    await events.until((seen) => ofType(seen, 'turn.ended').length === 1, 20_000);
    expect(await holderOf('deadline')).not.toBe(holder);
    const decided = ofType(events.events, 'approval.decided');
    expect(decided.map((event) => event.data)).toEqual([{ toolCallId: requested.data.toolCallId, approved: false, reason: 'approval timed out', timedOut: true }]);
    // Decided at the logged deadline (not a fresh timeout from the takeover, ~3 s later), and asked only once.
    const late = decided[0]!.ts - requested.data.deadline!;
    console.log(`approval deadline after failover: decided ${late} ms past the logged deadline`);
    expect(late).toBeGreaterThanOrEqual(0);
    expect(late).toBeLessThan(2_000);
    expect(ofType(events.events, 'approval.requested')).toHaveLength(1);
    expect(ofType(events.events, 'tool.result')[0]!.data).toMatchObject({ isError: true, error: { code: 'denied' } });
    expect(deployed.length).toBe(before);
    await check(['deadline']);
    events.stop();
  }, 60_000);

  it('suspends a call that asks the user, takes the answer on another node after the asking node is SIGKILLed, and runs the call once with its answers', async () => {
    const { events, nodes } = await forcedCall('ask', 'pick_branch', {}, (seen) => ofType(seen, 'tool.input_requested').length === 1);
    const first = ofType(events.events, 'tool.input_requested')[0]!;
    expect(first.data).toMatchObject({ name: 'pick_branch', requestId: `${first.data.toolCallId}:1`, question: 'Which branch should I release?', schema: { type: 'string', enum: ['main', 'next'] } });
    const toolCallId = first.data.toolCallId;
    // An answer that breaks the question's schema is refused; the question stays open.
    expect(await command('ask', 'input', { toolCallId, answer: 'develop' })).toMatchObject({ ok: false, error: { code: 'invalid_input' } });

    const holder = (await holderOf('ask'))!;
    await nodes[holder]!.stop('SIGKILL');
    // The survivor takes the session over (the lease lapses in ~2 s) and still accepts the answer.
    expect(await command('ask', 'input', { toolCallId, requestId: first.data.requestId, answer: 'main' })).toMatchObject({ ok: true });
    await events.until((seen) => ofType(seen, 'tool.input_requested').length === 2, 15_000);
    const second = ofType(events.events, 'tool.input_requested')[1]!;
    expect(second.data).toMatchObject({ requestId: `${toolCallId}:2`, question: 'Any release notes?' });
    // Through the CLI: `agentbus answer <session> <toolCallId> <answer>`.
    expect(await cli('answer', 'ask', toolCallId, 'first cut', '--request', second.data.requestId)).toMatchObject({ code: 0 });
    await events.until((seen) => ofType(seen, 'turn.ended').length === 1, 15_000);

    expect(await holderOf('ask')).not.toBe(holder);
    expect(ofType(events.events, 'tool.result')[0]!.data).toMatchObject({ isError: false, output: 'released main with notes: first cut' });
    expect(ofType(events.events, 'tool.input_answered').map((event) => event.data.answer)).toEqual(['main', 'first cut']);
    // One tool.use for the call, and the side effect ran once, in the run that had both answers.
    expect(ofType(events.events, 'tool.use')).toHaveLength(1);
    expect(askRuns.at(-1)).toEqual(['main', 'first cut']);
    expect(ofType(events.events, 'turn.ended')[0]!.data.reason).toBe('yielded');
    // Answering again: the question is closed.
    expect(await command('ask', 'input', { toolCallId, answer: 'again' })).toMatchObject({ ok: false });
    await check(['ask']);
    events.stop();
  }, 60_000);
});
