import { execFile } from 'node:child_process';
import { mkdtemp, rm, writeFile } from 'node:fs/promises';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { headers } from '@nats-io/nats-core';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { createCodec, traceIdOf } from '../../src/protocol/index.ts';
import type { AgentEvent, PromptReply } from '../../src/protocol/index.ts';
import { useNatsServer } from '../helpers/nats-fixture.ts';
import { startOtlpReceiver } from '../helpers/otlp-receiver.ts';
import type { OtlpReceiver, ReceivedSpan } from '../helpers/otlp-receiver.ts';
import { ROOT, startServiceProcess } from '../helpers/service-process.ts';
import type { ServiceProcess } from '../helpers/service-process.ts';
import { collectEvents } from '../helpers/stack.ts';

// One turn with a tool call, run by real processes (runtime, provider with the scripted provider, tools, memory)
// that export their spans over OTLP/HTTP JSON to a receiver in this test, as to a collector.
const nats = useNatsServer();
const codec = createCodec();
const SERVER = 2;
const CLIENT = 3;
let receiver: OtlpReceiver;
let folder: string;
const processes: ServiceProcess[] = [];
let env: Record<string, string>;

beforeAll(async () => {
  receiver = await startOtlpReceiver();
  folder = await mkdtemp(join(tmpdir(), 'agentbus-tracing-'));
  const script = join(folder, 'script.json');
  // Each session's turn: a call of current_time (after a slowly streamed sentence: a runtime can be killed
  // mid-stream), then an answer.
  const first = { text: 'Let me look at the clock.', chunkSize: 1, delayMs: 120, toolCalls: [{ name: 'current_time', args: {} }] };
  await writeFile(script, JSON.stringify({ responses: [first, { text: 'it is now' }] }));
  env = {
    NATS_URL: nats.server.url,
    AGENTBUS_SCRIPT: script,
    AGENTBUS_WORKSPACE: folder,
    OTEL_EXPORTER_OTLP_ENDPOINT: receiver.url,
    OTEL_EXPORTER_OTLP_PROTOCOL: 'http/json',
    OTEL_BSP_SCHEDULE_DELAY: '100',
    AGENTBUS_LEASE_TTL_MS: '1500',
  };
  // The runtime first: it makes the streams memory reads.
  for (const service of ['runtime', 'provider', 'tools', 'memory']) {
    const child = startServiceProcess(`services/${service}/main.ts`, env, { ipc: true });
    processes.push(child);
    await child.ready(60_000);
  }
  // The Synadia Agent Protocol host, which does not trace itself but hands its callers' trace context on.
  const agents = startServiceProcess('services/agents/main.ts', { ...env, AGENTBUS_AGENTS: JSON.stringify({ agents: [{ owner: 'acme', name: 'clock', tenant: 'acme', session: 'via-agents' }] }) });
  processes.push(agents);
  await agents.waitFor('agents service started', 60_000);
}, 240_000);

afterAll(async () => {
  for (const child of processes) await child.stop('SIGTERM');
  await receiver?.close();
  if (folder) await rm(folder, { recursive: true, force: true });
});

async function prompt(sessionId: string, traceparent?: string): Promise<AgentEvent[]> {
  const events = collectEvents(nats.nc, 'acme', sessionId);
  const requestHeaders = headers();
  requestHeaders.set('Content-Type', 'application/json');
  if (traceparent) requestHeaders.set('traceparent', traceparent);
  const reply = await nats.nc.request(`agentbus.acme.sessions.${sessionId}.prompt`, JSON.stringify({ text: 'what time is it?' }), { timeout: 10_000, headers: requestHeaders });
  expect((codec.decode(reply.data, reply.headers?.get('Content-Type')) as PromptReply).accepted).toBe(true);
  await events.until((seen) => seen.some((event) => event.type === 'turn.ended'), 30_000);
  events.stop();
  return events.events;
}

/** The spans of one trace once every service's have come: the exporters batch, so they come a little later. */
async function traceOf(traceId: string, services: readonly string[]): Promise<ReceivedSpan[]> {
  await expect
    .poll(() => new Set(receiver.spans.filter((span) => span.traceId === traceId && span.name !== 'step').map((span) => span.service)), { timeout: 20_000, interval: 100 })
    .toEqual(new Set(services));
  // The turn's own span ends last, with the turn: wait for it too.
  await expect.poll(() => receiver.spans.some((span) => span.traceId === traceId && span.name === 'invoke_agent'), { timeout: 20_000, interval: 100 }).toBe(true);
  return receiver.spans.filter((span) => span.traceId === traceId);
}

function one(spans: readonly ReceivedSpan[], test: (span: ReceivedSpan) => boolean, what: string): ReceivedSpan {
  const found = spans.filter(test);
  expect(found, `${what}: ${spans.map((span) => `${span.service}/${span.name}`).join(', ')}`).toHaveLength(1);
  return found[0]!;
}

describe('tracing across the bus', () => {
  it('one turn with a tool call is one trace over the runtime, provider, tools and memory, each span under its caller', async () => {
    const events = await prompt('traced');
    const started = events.find((event) => event.type === 'turn.started');
    const traceId = traceIdOf(started?.type === 'turn.started' ? started.data.trace?.traceparent : undefined);
    expect(traceId, 'turn.started carries the turn span context').toMatch(/^[\da-f]{32}$/);
    const spans = await traceOf(traceId!, ['agentbus-runtime', 'agentbus-provider', 'agentbus-tools', 'agentbus-memory']);

    const turn = one(spans, (span) => span.name === 'invoke_agent', 'the turn span');
    expect(turn).toMatchObject({ service: 'agentbus-runtime', parentSpanId: '' });
    expect(turn.attributes).toMatchObject({ 'gen_ai.operation.name': 'invoke_agent', 'gen_ai.conversation.id': 'traced', 'agentbus.tenant': 'acme', 'agentbus.turn.reason': 'yielded', 'agentbus.turn.steps': 2 });
    expect(started?.type === 'turn.started' && started.data.trace?.traceparent).toContain(turn.spanId);
    const steps = spans.filter((span) => span.name === 'step');
    expect(steps.map((span) => span.attributes['agentbus.step']).sort()).toEqual([1, 2]);
    for (const step of steps) expect(step.parentSpanId).toBe(turn.spanId);
    const [first, second] = [1, 2].map((number) => steps.find((step) => step.attributes['agentbus.step'] === number)!);

    // Each provider call: the runtime's client span in its step, the provider's server span under it.
    const chats = spans.filter((span) => span.service === 'agentbus-runtime' && span.kind === CLIENT && span.name === 'chat default');
    expect(chats.map((span) => span.parentSpanId).sort()).toEqual([first!.spanId, second!.spanId].sort());
    for (const chat of chats) {
      expect(chat.attributes).toMatchObject({ 'gen_ai.operation.name': 'chat', 'gen_ai.provider.name': 'scripted', 'gen_ai.request.model': 'default' });
      const served = one(spans, (span) => span.service === 'agentbus-provider' && span.parentSpanId === chat.spanId, 'the provider span of a call');
      expect(served).toMatchObject({ name: 'chat default', kind: SERVER });
      expect(served.attributes['gen_ai.response.finish_reasons']).toHaveLength(1);
    }
    expect(chats.find((chat) => chat.parentSpanId === second!.spanId)?.attributes['gen_ai.usage.output_tokens']).toBeGreaterThan(0);

    // The tool call: the runtime's client span in step 1, the worker's server span under it.
    const toolCall = one(spans, (span) => span.service === 'agentbus-runtime' && span.name === 'execute_tool current_time', 'the runtime tool span');
    expect(toolCall).toMatchObject({ kind: CLIENT, parentSpanId: first!.spanId });
    const toolUse = events.find((event) => event.type === 'tool.use');
    expect(toolCall.attributes).toMatchObject({ 'gen_ai.tool.name': 'current_time', 'gen_ai.tool.call.id': toolUse?.type === 'tool.use' ? toolUse.data.toolCallId : '?' });
    const ran = one(spans, (span) => span.service === 'agentbus-tools', 'the worker tool span');
    expect(ran).toMatchObject({ name: 'execute_tool current_time', kind: SERVER, parentSpanId: toolCall.spanId, statusCode: 0 });

    // Memory was asked for recall at step 1.
    const recall = one(spans, (span) => span.service === 'agentbus-runtime' && span.name === 'search_memory', 'the runtime recall span');
    expect(recall).toMatchObject({ kind: CLIENT, parentSpanId: first!.spanId });
    const searched = one(spans, (span) => span.service === 'agentbus-memory', 'the memory span');
    expect(searched).toMatchObject({ name: 'search_memory', kind: SERVER, parentSpanId: recall.spanId });
    expect(receiver.rejected).toEqual([]);
  }, 90_000);

  it('a prompt sent with a traceparent header joins the caller\'s trace', async () => {
    const callerTrace = 'a1b2c3d4e5f60718293a4b5c6d7e8f90';
    const callerSpan = '0123456789abcdef';
    const events = await prompt('joined', `00-${callerTrace}-${callerSpan}-01`);
    const message = events.find((event) => event.type === 'user.message');
    expect(message?.type === 'user.message' && message.data.trace).toEqual({ traceparent: `00-${callerTrace}-${callerSpan}-01` });
    const spans = await traceOf(callerTrace, ['agentbus-runtime', 'agentbus-provider', 'agentbus-tools', 'agentbus-memory']);
    const turn = one(spans, (span) => span.name === 'invoke_agent', 'the turn span');
    expect(turn.parentSpanId).toBe(callerSpan);
    const started = events.find((event) => event.type === 'turn.started');
    expect(traceIdOf(started?.type === 'turn.started' ? started.data.trace?.traceparent : undefined)).toBe(callerTrace);
  }, 90_000);
});

describe('tracing through the agents host', () => {
  it('a Synadia Agent Protocol prompt with a traceparent header runs its turn in the caller\'s trace', async () => {
    const callerTrace = 'feedfacecafebeef0011223344556677';
    const callerSpan = '8899aabbccddeeff';
    const events = collectEvents(nats.nc, 'acme', 'via-agents');
    const requestHeaders = headers();
    requestHeaders.set('traceparent', `00-${callerTrace}-${callerSpan}-01`);
    // The first message of the response stream is the ack (§6); the turn's events tell the rest.
    const ack = await nats.nc.request('agents.prompt.agentbus.acme.clock', JSON.stringify({ prompt: 'what time is it?' }), { timeout: 10_000, headers: requestHeaders });
    expect(ack.headers?.code ?? 200).toBeLessThan(400);
    await events.until((seen) => seen.some((event) => event.type === 'turn.ended'), 30_000);
    events.stop();
    const message = events.events.find((event) => event.type === 'user.message');
    expect(message?.type === 'user.message' && message.data.trace).toEqual({ traceparent: `00-${callerTrace}-${callerSpan}-01` });
    const spans = await traceOf(callerTrace, ['agentbus-runtime', 'agentbus-provider', 'agentbus-tools', 'agentbus-memory']);
    expect(one(spans, (span) => span.name === 'invoke_agent', 'the turn span').parentSpanId).toBe(callerSpan);
  }, 90_000);
});

describe('tracing across failover', () => {
  it('a turn resumed on another runtime node continues the trace its turn.started logged', async () => {
    const events = collectEvents(nats.nc, 'acme', 'failover');
    const requestHeaders = headers();
    requestHeaders.set('Content-Type', 'application/json');
    await nats.nc.request('agentbus.acme.sessions.failover.prompt', JSON.stringify({ text: 'what time is it?' }), { timeout: 10_000, headers: requestHeaders });
    // The first answer is streaming: its node dies with the turn in flight, its own spans never exported.
    await events.until((seen) => seen.some((event) => event.type === 'assistant.delta'), 20_000);
    const dead = processes[0]!;
    expect(await dead.stop('SIGKILL')).toBe(null);
    const next = startServiceProcess('services/runtime/main.ts', env, { ipc: true });
    processes[0] = next;
    await next.ready(60_000);
    await events.until((seen) => seen.some((event) => event.type === 'turn.ended'), 60_000);
    events.stop();
    const started = events.events.filter((event) => event.type === 'turn.started');
    expect(started).toHaveLength(1);
    const logged = started[0]?.type === 'turn.started' ? started[0].data.trace?.traceparent : undefined;
    const traceId = traceIdOf(logged)!;
    // The resumed step's answer is the script's next one, text only: no tool runs.
    const spans = await traceOf(traceId, ['agentbus-runtime', 'agentbus-provider', 'agentbus-memory']);
    const turn = one(spans, (span) => span.name === 'invoke_agent', 'the resumed turn span');
    expect(turn.attributes).toMatchObject({ 'agentbus.turn.resumed': true, 'agentbus.turn.reason': 'yielded' });
    expect(logged).toBe(`00-${traceId}-${turn.parentSpanId}-01`);
    // The resumed node's provider call is in the same trace, under its step.
    const steps = spans.filter((span) => span.name === 'step' && span.parentSpanId === turn.spanId);
    expect(steps.length).toBeGreaterThan(0);
    const chat = spans.find((span) => span.service === 'agentbus-runtime' && span.name === 'chat default' && steps.some((step) => step.spanId === span.parentSpanId));
    expect(chat).toBeDefined();
    expect(spans.some((span) => span.service === 'agentbus-provider' && span.parentSpanId === chat!.spanId)).toBe(true);
  }, 150_000);
});

describe('tracing off', () => {
  /** Runs the probe (the services' modules, then tracing started as runService does) with these OTEL_* variables. */
  function probe(otel: Record<string, string>): Promise<{ enabled: boolean; loaded: string[] }> {
    const env = Object.fromEntries(Object.entries(process.env).filter(([name]) => !name.startsWith('OTEL_')));
    return new Promise((resolve, reject) => {
      execFile(process.execPath, ['--import', 'tsx', 'test/fixtures/tracing-probe.ts'], { cwd: ROOT, env: { ...env, ...otel }, timeout: 60_000 }, (error, stdout, stderr) => {
        if (error) reject(new Error(`${error.message}\n${stderr}`));
        else resolve(JSON.parse(stdout.trim().split('\n').at(-1)!) as { enabled: boolean; loaded: string[] });
      });
    });
  }

  it('loads no OpenTelemetry SDK package unless the environment turns tracing on', async () => {
    // The API alone may be there: the Anthropic SDK imports it (and traces through it only once an SDK is registered).
    const off = await probe({});
    expect(off.enabled).toBe(false);
    expect(off.loaded.filter((name) => name !== '@opentelemetry/api')).toEqual([]);
    const on = await probe({ OTEL_EXPORTER_OTLP_ENDPOINT: 'http://127.0.0.1:9' });
    expect(on.enabled).toBe(true);
    expect(on.loaded).toEqual(expect.arrayContaining(['@opentelemetry/sdk-trace-base', '@opentelemetry/exporter-trace-otlp-proto']));
  }, 120_000);
});
