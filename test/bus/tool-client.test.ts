import { describe, expect, it } from 'vitest';
import { pino } from 'pino';
import { z } from 'zod';
import { SafetyTier, createCodec, createSubjects } from '../../src/protocol/index.ts';
import type { ToolCallRequest } from '../../src/protocol/index.ts';
import { msgpackHeaders } from '../../src/bus/request.ts';
import { createServiceRegistration } from '../../src/bus/service-registry.ts';
import { createToolClient } from '../../src/bus/tool-client.ts';
import { createToolWorker, defineTool, toToolMetadata } from '../../src/tool-sdk/index.ts';
import { useNatsServer } from '../helpers/nats-fixture.ts';

const nats = useNatsServer();
const logger = pino({ level: 'silent' });
const codec = createCodec();
const subjects = createSubjects('ct');

function callRequest(name: string, args: unknown = {}): ToolCallRequest {
  return { v: 1, callId: `c-${name}`, effectId: `e-${name}`, name, args, tenant: 'default', sessionId: 's', turnId: 't', deadline: Date.now() + 5000 };
}

const ping = defineTool({
  name: 'ping',
  description: 'Answers pong',
  parameters: z.object({}),
  tier: SafetyTier.readOnly,
  timeoutMs: 1000,
  idempotent: true,
  execute: () => ({ pong: true }),
});

describe('tool client', () => {
  it('answers unknown_tool when no worker serves the tool', async () => {
    const reply = await createToolClient({ nc: nats.nc, subjects, codec, logger }).call(callRequest('nobody_serves_me'), {});
    expect(reply).toEqual({
      v: 1,
      callId: 'c-nobody_serves_me',
      ok: false,
      error: { code: 'unknown_tool', message: 'no live worker serves tool nobody_serves_me', retryable: false },
    });
  });

  it('answers unknown_tool for a name that is not a subject token', async () => {
    const reply = await createToolClient({ nc: nats.nc, subjects, codec, logger }).call(callRequest('rm -rf'), {});
    expect(reply).toMatchObject({ ok: false, error: { code: 'unknown_tool' } });
  });

  it('answers timeout, retryable, when the worker does not reply in time', async () => {
    const subscription = nats.nc.subscribe(subjects.toolCall('mute'), { callback: () => {} });
    const reply = await createToolClient({ nc: nats.nc, subjects, codec, logger }).call(callRequest('mute'), { timeoutMs: 100 });
    expect(reply).toMatchObject({ ok: false, error: { code: 'timeout', retryable: true } });
    subscription.unsubscribe();
  });

  it('answers internal when the reply is malformed or belongs to another call', async () => {
    const garbage = nats.nc.subscribe(subjects.toolCall('garbage'), {
      callback: (_e, message) => {
        message.respond(new Uint8Array([0xc1]));
      },
    });
    const stranger = nats.nc.subscribe(subjects.toolCall('stranger'), {
      callback: (_e, message) => {
        message.respond(codec.encode({ v: 1, callId: 'other', ok: true, output: 1 }), { headers: msgpackHeaders() });
      },
    });
    const tools = createToolClient({ nc: nats.nc, subjects, codec, logger });
    expect(await tools.call(callRequest('garbage'), {})).toMatchObject({ ok: false, error: { code: 'internal' } });
    expect(await tools.call(callRequest('stranger'), {})).toMatchObject({ ok: false, error: { code: 'internal' } });
    garbage.unsubscribe();
    stranger.unsubscribe();
  });

  it('passes JSON outputs through unchanged', async () => {
    const worker = createToolWorker({ nc: nats.nc, subjects, codec, logger, tools: [ping], version: '1.0.0' });
    await worker.start();
    expect(await createToolClient({ nc: nats.nc, subjects, codec, logger }).call(callRequest('ping'), {})).toEqual({
      v: 1,
      callId: 'c-ping',
      ok: true,
      output: { pong: true },
    });
    await worker.stop();
  });

  it('answers no_responders, retryable, for a tool a worker announced before and none serves now (a restart), until invalidate forgets it', async () => {
    const tools = createToolClient({ nc: nats.nc, subjects, codec, logger, discoveryTtlMs: 0 });
    const worker = createToolWorker({ nc: nats.nc, subjects, codec, logger, tools: [ping], version: '1.0.0' });
    await worker.start();
    expect((await tools.listTools({})).map((tool) => tool.name)).toEqual(['ping']);
    await worker.stop();
    expect(await tools.listTools({})).toEqual([]);
    expect(tools.announced('ping')).toMatchObject({ name: 'ping', tier: 'read_only' });
    expect(await tools.call(callRequest('ping'), {})).toMatchObject({ ok: false, error: { code: 'no_responders', retryable: true } });
    tools.invalidate();
    expect(tools.announced('ping')).toBeUndefined();
    expect(await tools.call(callRequest('ping'), {})).toMatchObject({ ok: false, error: { code: 'unknown_tool', retryable: false } });
  });

  it('names the call id, tenant and session in the cancel it sends on abort', async () => {
    const cancels: unknown[] = [];
    const calls = nats.nc.subscribe(subjects.toolCall('stuck'), { callback: () => {} });
    const cancelled = nats.nc.subscribe(subjects.toolCancel('stuck'), {
      callback: (_error, message) => {
        cancels.push(codec.decode(message.data, message.headers?.get('Content-Type')));
        message.respond(codec.encode({ v: 1, id: 'x', cancelled: true }), { headers: msgpackHeaders() });
      },
    });
    await nats.nc.flush();
    const controller = new AbortController();
    const pending = createToolClient({ nc: nats.nc, subjects, codec, logger }).call({ ...callRequest('stuck'), tenant: 'acme', sessionId: 's-9' }, { signal: controller.signal });
    setTimeout(() => controller.abort(new Error('stop')), 50);
    await expect(pending).rejects.toThrow('stop');
    expect(cancels).toEqual([{ v: 1, id: 'c-stuck', tenant: 'acme', sessionId: 's-9' }]);
    calls.unsubscribe();
    cancelled.unsubscribe();
  });

  it('reuses the tool list for the TTL and sees new tools after it', async () => {
    let clock = 0;
    const tools = createToolClient({ nc: nats.nc, subjects, codec, logger, discoveryTtlMs: 1000, now: () => clock });
    expect(await tools.listTools({})).toEqual([]);
    const worker = createToolWorker({ nc: nats.nc, subjects, codec, logger, tools: [ping], version: '1.0.0' });
    await worker.start();
    expect(await tools.listTools({})).toEqual([]);
    clock = 1000;
    expect((await tools.listTools({})).map((tool) => tool.name)).toEqual(['ping']);
    await worker.stop();
  });

  it('refreshes the tool list in the background near the end of its TTL, so steady callers never wait for discovery', async () => {
    let clock = 0;
    const tools = createToolClient({ nc: nats.nc, subjects, codec, logger, discoveryTtlMs: 1000, refreshAheadMs: 300, now: () => clock });
    expect(await tools.listTools({})).toEqual([]);
    const worker = createToolWorker({ nc: nats.nc, subjects, codec, logger, tools: [ping], version: '1.0.0' });
    await worker.start();
    clock = 800;
    // Still fresh: answered from the cache at once, while a discovery starts behind it.
    expect(await tools.listTools({})).toEqual([]);
    await new Promise((resolve) => setTimeout(resolve, 600));
    await worker.stop();
    clock = 1700;
    // The list found at 800 is fresh until 1800: no wait, and the stopped worker's tool is still listed.
    expect((await tools.listTools({})).map((tool) => tool.name)).toEqual(['ping']);
    clock = 1800;
    expect(await tools.listTools({})).toEqual([]);
  });

  it('lists tools of any service on this prefix and skips other prefixes and malformed metadata', async () => {
    const foreign = createServiceRegistration(nats.nc, {
      name: 'other-lang-tools',
      version: '1.0.0',
      endpoints: [
        { name: 'ping', subject: subjects.toolCall('ping'), queueGroup: subjects.toolQueue('ping'), metadata: toToolMetadata(ping) },
        { name: 'elsewhere', subject: createSubjects('zz').toolCall('elsewhere'), metadata: toToolMetadata(ping) },
        { name: 'broken', subject: subjects.toolCall('broken'), metadata: { description: 'x', parameters: '{nope', tier: 'read_only', timeoutMs: '1', idempotent: 'true' } },
      ],
    });
    await nats.nc.flush();
    const tools = await createToolClient({ nc: nats.nc, subjects, codec, logger, discoveryTtlMs: 0 }).listTools({});
    expect(tools.map((tool) => tool.name)).toEqual(['ping']);
    expect(tools[0]).toMatchObject({ description: 'Answers pong', tier: 'read_only', timeoutMs: 1000, idempotent: true });
    await foreign.stop();
  });

  it('takes the strictest reading of a tool whose workers disagree: a worker that says read-only cannot take away an approval', async () => {
    const meta = (tier: string, idempotent: boolean, timeoutMs = 1000) => ({ ...toToolMetadata(ping), tier, idempotent: String(idempotent), timeoutMs: String(timeoutMs) });
    const registrations = [
      { name: 'lenient', endpoints: { deploy: meta('read_only', true), tidy: meta('side_effecting', true) } },
      { name: 'strict', endpoints: { deploy: meta('privileged', false, 9000), tidy: meta('side_effecting', true) } },
      { name: 'odd', endpoints: { deploy: meta('read_only', true), tidy: meta('bogus', true) } },
    ].map(({ name, endpoints }) =>
      createServiceRegistration(nats.nc, {
        name,
        version: '1.0.0',
        endpoints: Object.entries(endpoints).map(([tool, metadata]) => ({ name: tool, subject: subjects.toolCall(tool), queueGroup: subjects.toolQueue(tool), metadata })),
      }),
    );
    await nats.nc.flush();
    const tools = await createToolClient({ nc: nats.nc, subjects, codec, logger, discoveryTtlMs: 0 }).listTools({});
    // Whichever answered discovery first, the strictest wins; an unknown tier counts as privileged.
    expect(tools.map(({ name, tier, idempotent, timeoutMs }) => ({ name, tier, idempotent, timeoutMs }))).toEqual([
      { name: 'deploy', tier: 'privileged', idempotent: false, timeoutMs: 9000 },
      { name: 'tidy', tier: 'privileged', idempotent: true, timeoutMs: 1000 },
    ]);
    await Promise.all(registrations.map((registration) => registration.stop()));
  });

  it('rejects listTools with the abort reason when already aborted', async () => {
    const tools = createToolClient({ nc: nats.nc, subjects, codec, logger });
    await expect(tools.listTools({ signal: AbortSignal.abort(new Error('no')) })).rejects.toThrow('no');
  });
});
