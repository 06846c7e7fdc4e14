import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import type { NatsConnection } from '@nats-io/nats-core';
import { connect } from '@nats-io/transport-node';
import { pino } from 'pino';
import { z } from 'zod';
import { AgentbusError } from '../../src/errors.ts';
import { SafetyTier, ToolCallHeader, createCodec, createSubjects } from '../../src/protocol/index.ts';
import type { CancelAck, ToolCallRequest } from '../../src/protocol/index.ts';
import { msgpackHeaders } from '../../src/bus/request.ts';
import { discoverServices } from '../../src/bus/service-registry.ts';
import { createToolClient } from '../../src/bus/tool-client.ts';
import { createToolWorker, defineTool } from '../../src/tool-sdk/index.ts';
import { createScrubber } from '../../src/scrub/index.ts';
import type { AnyToolDefinition, ToolContext, ToolWorker } from '../../src/tool-sdk/index.ts';
import { startNatsServer } from '../helpers/nats-server.ts';
import type { TestNatsServer } from '../helpers/nats-server.ts';

let server: TestNatsServer;
let nc: NatsConnection;
const logger = pino({ level: 'silent' });
const codec = createCodec();
const subjects = createSubjects('wt');
let sequence = 0;

beforeAll(async () => {
  server = await startNatsServer();
  nc = await connect({ servers: server.url });
});

afterAll(async () => {
  await nc?.close();
  await server?.stop();
});

function callRequest(name: string, args: unknown, deadlineMs = 5000): ToolCallRequest {
  sequence += 1;
  return {
    v: 1,
    callId: `call-${sequence}`,
    effectId: `effect-${sequence}`,
    name,
    args,
    tenant: 'default',
    sessionId: 's1',
    turnId: 't1',
    deadline: Date.now() + deadlineMs,
  };
}

async function startWorker(tools: AnyToolDefinition[], extra: { maxConcurrency?: number; maxQueued?: number } = {}): Promise<ToolWorker> {
  const worker = createToolWorker({ nc, subjects, codec, logger, tools, version: '0.1.0', stopGraceMs: 200, ...extra });
  await worker.start();
  return worker;
}

const client = () => createToolClient({ nc, subjects, codec, logger, discoveryTtlMs: 0 });

function deferred(): { promise: Promise<void>; resolve: () => void } {
  let resolve: () => void = () => {};
  const promise = new Promise<void>((done) => (resolve = done));
  return { promise, resolve };
}

/** A read-only, idempotent tool without parameters: the shape most tests here need. */
function plainTool(name: string, description: string, timeoutMs: number, execute: (args: unknown, context: ToolContext) => unknown): AnyToolDefinition {
  return defineTool({ name, description, parameters: z.object({}), tier: SafetyTier.readOnly, timeoutMs, idempotent: true, execute });
}

/** A tool that runs until its signal aborts, then rejects with the reason. */
function blockingTool(name: string, onAbort: (reason: unknown) => void, started?: () => void): AnyToolDefinition {
  return plainTool(name, 'Waits until aborted', 10_000, (_args, { signal }) =>
    new Promise((_, reject) => {
      started?.();
      signal.addEventListener('abort', () => {
        onAbort(signal.reason);
        reject(signal.reason);
      });
    }),
  );
}

const echo = defineTool({
  name: 'echo',
  description: 'Returns its text',
  parameters: z.object({ text: z.string(), times: z.number().int().min(1).default(1) }),
  tier: SafetyTier.readOnly,
  timeoutMs: 2000,
  idempotent: true,
  execute: ({ text, times }) => text.repeat(times),
});

describe('tool worker', () => {
  it('answers a call with the tool output', async () => {
    const worker = await startWorker([echo]);
    const reply = await client().call(callRequest('echo', { text: 'ab', times: 2 }), {});
    expect(reply).toMatchObject({ ok: true, output: 'abab' });
    await worker.stop();
  });

  it('sends the output as text scrubbed with the full pass, and says so, only to a caller that asks', async () => {
    const token = 'ghp_aB3dE6gH9jK2mN5pQ8sT1vW4yZ7bC0eF3hI6';
    const leaky = plainTool('leaky', 'Returns a token', 2000, () => ({ config: `token: ${token}` }));
    const worker = await startWorker([leaky]);
    const asked = await client().call(callRequest('leaky', {}), { scrubOutput: true });
    expect(asked).toMatchObject({ ok: true, outputScrubbed: true });
    expect(asked.ok && typeof asked.output).toBe('string');
    expect(JSON.stringify(asked)).not.toContain(token);
    expect(asked.ok && asked.output).toContain('[REDACTED:github]');
    const plain = await client().call(callRequest('leaky', {}), {});
    expect(plain).toEqual(expect.objectContaining({ ok: true, output: { config: `token: ${token}` } }));
    expect(plain.outputScrubbed).toBeUndefined();
    await worker.stop();
  });

  it('takes a reply as scrubbed only when it asked and the worker said so', async () => {
    // A worker of its own making: says scrubbed whether asked or not, and scrubs nothing.
    const subject = subjects.toolCall('claims');
    const raw = nc.subscribe(subject, {
      callback: (_error, message) => {
        const request = codec.decode(message.data, 'application/msgpack') as ToolCallRequest;
        const replyHeaders = msgpackHeaders();
        replyHeaders.set(ToolCallHeader.outputScrubbed, '1');
        message.respond(codec.encode({ v: 1, callId: request.callId, ok: true, output: 'text' }), { headers: replyHeaders });
      },
    });
    await nc.flush();
    expect((await client().call(callRequest('claims', {}), { timeoutMs: 2000 })).outputScrubbed).toBeUndefined();
    expect((await client().call(callRequest('claims', {}), { timeoutMs: 2000, scrubOutput: true })).outputScrubbed).toBe(true);
    raw.unsubscribe();
  });

  it('gives a tool a logger bound to its call', async () => {
    const lines: Array<Record<string, unknown>> = [];
    const recording = pino({ level: 'info' }, { write: (line: string) => void lines.push(JSON.parse(line) as Record<string, unknown>) });
    const noisy = plainTool('noisy', 'Logs a line.', 1000, (_args, context) => {
      context.logger.info('working');
      return 'done';
    });
    const worker = createToolWorker({ nc, subjects, codec, logger: recording, tools: [noisy], version: '0.1.0', stopGraceMs: 200 });
    await worker.start();
    try {
      expect(await client().call(callRequest('noisy', {}), {})).toMatchObject({ ok: true, output: 'done' });
      expect(lines.find((line) => line.msg === 'working')).toMatchObject({ tool: 'noisy', callId: expect.any(String) });
    } finally {
      await worker.stop();
    }
  });

  it('shares calls between two workers in the queue group', async () => {
    const seen: string[] = [];
    const whoami = (label: string) =>
      plainTool('whoami', 'Names the worker', 1000, () => {
        seen.push(label);
        return label;
      });
    const first = await startWorker([whoami('first')]);
    const second = await startWorker([whoami('second')]);
    const tools = client();
    await Promise.all(Array.from({ length: 40 }, () => tools.call(callRequest('whoami', {}), {})));
    expect(seen).toHaveLength(40);
    expect(new Set(seen)).toEqual(new Set(['first', 'second']));
    await Promise.all([first.stop(), second.stop()]);
  });

  it('refuses arguments that do not match the schema with a readable invalid_arguments error', async () => {
    const worker = await startWorker([echo]);
    const reply = await client().call(callRequest('echo', { text: 3 }), {});
    expect(reply.ok).toBe(false);
    if (reply.ok) return;
    expect(reply.error.code).toBe('invalid_arguments');
    expect(reply.error.retryable).toBe(false);
    expect(reply.error.message).toMatch(/^invalid arguments for echo: text: .*expected string/i);
    await worker.stop();
  });

  it('answers a malformed request with invalid_input', async () => {
    const worker = await startWorker([echo]);
    const message = await nc.request(subjects.toolCall('echo'), codec.encode({ v: 1, callId: 'x' }), { timeout: 1000, headers: msgpackHeaders() });
    expect(codec.decode(message.data, message.headers?.get('Content-Type'))).toMatchObject({
      v: 1,
      callId: 'x',
      ok: false,
      error: { code: 'invalid_input', retryable: false },
    });
    await worker.stop();
  });

  it('answers tool_failed, not the worker codes, for a tool that threw no_responders, busy or worker_lost: the call did run', async () => {
    let runs = 0;
    const codes = ['no_responders', 'busy', 'worker_lost'];
    const saving = defineTool({
      name: 'save_then_fail',
      description: 'Does its work, then a request of its own finds no responder',
      parameters: z.object({ code: z.string() }),
      tier: SafetyTier.sideEffecting,
      timeoutMs: 1000,
      idempotent: false,
      execute: ({ code }) => {
        runs += 1;
        throw new AgentbusError(code, `memory did not answer (${code})`, { retryable: true });
      },
    });
    const worker = await startWorker([saving]);
    const tools = client();
    for (const code of codes) {
      expect(await tools.call(callRequest('save_then_fail', { code }), {})).toMatchObject({
        ok: false,
        error: { code: 'tool_failed', message: `${code}: memory did not answer (${code})`, retryable: false },
      });
    }
    expect(runs).toBe(3);
    await worker.stop();
  });

  it('turns a thrown error into tool_failed and keeps the code of an AgentbusError', async () => {
    const broken = defineTool({
      name: 'broken',
      description: 'Fails',
      parameters: z.object({ typed: z.boolean() }),
      tier: SafetyTier.sideEffecting,
      timeoutMs: 1000,
      idempotent: false,
      execute: ({ typed }) => {
        if (typed) throw new AgentbusError('not_found', 'no such thing');
        throw new Error('disk on fire');
      },
    });
    const worker = await startWorker([broken]);
    const tools = client();
    expect(await tools.call(callRequest('broken', { typed: false }), {})).toMatchObject({
      ok: false,
      error: { code: 'tool_failed', message: 'disk on fire', retryable: false },
    });
    expect(await tools.call(callRequest('broken', { typed: true }), {})).toMatchObject({
      ok: false,
      error: { code: 'not_found', message: 'no such thing' },
    });
    await worker.stop();
  });

  it('times out a tool that runs past its timeoutMs, aborting its signal', async () => {
    const aborted = deferred();
    const slow = plainTool('slow', 'Sleeps', 100, async (_args, { signal }) => {
      signal.addEventListener('abort', aborted.resolve);
      await new Promise((resolve) => setTimeout(resolve, 5000));
    });
    const worker = await startWorker([slow]);
    const started = Date.now();
    const reply = await client().call(callRequest('slow', {}), {});
    expect(Date.now() - started).toBeLessThan(2000);
    expect(reply).toMatchObject({ ok: false, error: { code: 'timeout', retryable: true } });
    await aborted.promise;
    await worker.stop();
  });

  it('answers timeout at once when the request deadline already passed', async () => {
    let ran = false;
    const tool = plainTool('late', 'Never runs', 1000, () => {
      ran = true;
    });
    const worker = await startWorker([tool]);
    const reply = await client().call({ ...callRequest('late', {}), deadline: Date.now() - 1 }, { timeoutMs: 1000 });
    expect(reply).toMatchObject({ ok: false, error: { code: 'timeout' } });
    expect(ran).toBe(false);
    await worker.stop();
  });

  it('runs at most maxConcurrency calls at once and queues the rest', async () => {
    let running = 0;
    let peak = 0;
    const busy = plainTool('busy', 'Takes a while', 2000, async () => {
      running += 1;
      peak = Math.max(peak, running);
      await new Promise((resolve) => setTimeout(resolve, 30));
      running -= 1;
      return 'done';
    });
    const worker = await startWorker([busy], { maxConcurrency: 2 });
    const replies = await Promise.all(Array.from({ length: 8 }, () => client().call(callRequest('busy', {}), {})));
    expect(replies.every((reply) => reply.ok)).toBe(true);
    expect(peak).toBe(2);
    await worker.stop();
  });

  it('sheds the calls past maxQueued at once with a retryable busy, never started, instead of leaving them unread', async () => {
    let started = 0;
    const slow = plainTool('slow_queue', 'Takes a while', 5000, async () => {
      started += 1;
      await new Promise((resolve) => setTimeout(resolve, 300));
      return 'done';
    });
    const worker = await startWorker([slow], { maxConcurrency: 1, maxQueued: 2 });
    const began = Date.now();
    const replies = await Promise.all(Array.from({ length: 5 }, () => client().call(callRequest('slow_queue', {}), {}).then((reply) => ({ reply, ms: Date.now() - began }))));
    const shed = replies.filter(({ reply }) => !reply.ok);
    expect(replies.filter(({ reply }) => reply.ok)).toHaveLength(3);
    expect(shed.map(({ reply }) => reply)).toEqual([0, 1].map(() => expect.objectContaining({ ok: false, error: expect.objectContaining({ code: 'busy', retryable: true }) })));
    // Answered at once, not after the calls ahead of them.
    for (const { ms } of shed) expect(ms).toBeLessThan(250);
    expect(started).toBe(3);
    await worker.stop();
  });
});

describe('tool cancellation', () => {
  it('rejects at once and runs nothing when the signal is already aborted', async () => {
    let ran = false;
    const worker = await startWorker([blockingTool('never', () => {}, () => (ran = true))]);
    await expect(client().call(callRequest('never', {}), { signal: AbortSignal.abort(new Error('too late')) })).rejects.toThrow('too late');
    await new Promise((resolve) => setTimeout(resolve, 50));
    expect(ran).toBe(false);
    await worker.stop();
  });

  it('aborts the running tool, acknowledges the cancel and rejects the call with the reason', async () => {
    const aborted = deferred();
    const started = deferred();
    let reason: unknown;
    const worker = await startWorker([
      blockingTool(
        'wait_cancel',
        (value) => {
          reason = value;
          aborted.resolve();
        },
        started.resolve,
      ),
    ]);
    const controller = new AbortController();
    const pending = client().call(callRequest('wait_cancel', {}), { signal: controller.signal });
    await started.promise;
    controller.abort(new Error('user pressed stop'));
    await expect(pending).rejects.toThrow('user pressed stop');
    await aborted.promise;
    expect((reason as Error).name).toBe('CancelledError');
    expect(worker.activeCalls).toBe(0);
    await worker.stop();
  });

  it('acks a cancel only from the worker that holds the call', async () => {
    const started = deferred();
    const first = await startWorker([blockingTool('held', () => {}, started.resolve)]);
    const second = await startWorker([blockingTool('held', () => {}, started.resolve)]);
    const request = callRequest('held', {});
    const pending = nc.request(subjects.toolCall('held'), codec.encode(request), { timeout: 5000, headers: msgpackHeaders() });
    await started.promise;
    const acks: unknown[] = [];
    const replies = await nc.requestMany(subjects.toolCancel('held'), codec.encode({ v: 1, id: request.callId }), {
      strategy: 'timer',
      maxWait: 300,
    });
    for await (const message of replies) acks.push(codec.decode(message.data, message.headers?.get('Content-Type')));
    const ack: CancelAck = { v: 1, id: request.callId, cancelled: true };
    expect(acks).toEqual([ack]);
    const reply = await pending;
    expect(codec.decode(reply.data, reply.headers?.get('Content-Type'))).toMatchObject({ ok: false, error: { code: 'cancelled' } });
    await Promise.all([first.stop(), second.stop()]);
  });

  it('keeps two sessions apart that reuse one call id (an older runtime): a cancel naming one session ends only its call', async () => {
    const started: string[] = [];
    const both = deferred();
    const worker = await startWorker([
      plainTool('slow_shared', 'Answers after 400 ms unless aborted', 5_000, (_args, { signal, sessionId }) => {
        started.push(sessionId);
        if (started.length === 2) both.resolve();
        return new Promise((resolve, reject) => {
          const timer = setTimeout(() => resolve(`done for ${sessionId}`), 400);
          signal.addEventListener('abort', () => (clearTimeout(timer), reject(signal.reason)), { once: true });
        });
      }),
    ]);
    const send = (sessionId: string) =>
      nc.request(subjects.toolCall('slow_shared'), codec.encode({ ...callRequest('slow_shared', {}), callId: 'call_0', sessionId }), { timeout: 5000, headers: msgpackHeaders() });
    const a = send('sa');
    const b = send('sb');
    await both.promise;
    const ack = await nc.request(subjects.toolCancel('slow_shared'), codec.encode({ v: 1, id: 'call_0', tenant: 'default', sessionId: 'sa' }), { timeout: 1000 });
    expect(codec.decode(ack.data, ack.headers?.get('Content-Type'))).toEqual({ v: 1, id: 'call_0', cancelled: true });
    const [replyA, replyB] = await Promise.all([a, b]);
    expect(codec.decode(replyA.data, replyA.headers?.get('Content-Type'))).toMatchObject({ ok: false, error: { code: 'cancelled' } });
    expect(codec.decode(replyB.data, replyB.headers?.get('Content-Type'))).toEqual({ v: 1, callId: 'call_0', ok: true, output: 'done for sb' });
    expect(worker.activeCalls).toBe(0);
    await worker.stop();
  });

  it('remembers a cancel for a call it does not hold only for that call: another session\'s call of the same id still runs', async () => {
    const worker = await startWorker([plainTool('after_cancel', 'Answers at once', 1_000, (_args, { sessionId }) => `ran for ${sessionId}`)]);
    // The cancel comes first (the call may still sit in the subscription buffer): nobody holds call_7 yet.
    await nc.request(subjects.toolCancel('after_cancel'), codec.encode({ v: 1, id: 'call_7', tenant: 'default', sessionId: 'sa' }), { timeout: 300 }).catch(() => undefined);
    const send = async (sessionId: string) => {
      const reply = await nc.request(subjects.toolCall('after_cancel'), codec.encode({ ...callRequest('after_cancel', {}), callId: 'call_7', sessionId }), { timeout: 5000, headers: msgpackHeaders() });
      return codec.decode(reply.data, reply.headers?.get('Content-Type'));
    };
    expect(await send('sb')).toEqual({ v: 1, callId: 'call_7', ok: true, output: 'ran for sb' });
    expect(await send('sa')).toMatchObject({ ok: false, error: { code: 'cancelled' } });
    // Once only: the remembered cancel was used up.
    expect(await send('sa')).toMatchObject({ ok: true, output: 'ran for sa' });
    await worker.stop();
  });

  it('still takes an older runtime\'s cancel that names no session, by id alone', async () => {
    const worker = await startWorker([plainTool('old_cancel', 'Answers at once', 1_000, () => 'ran')]);
    await nc.request(subjects.toolCancel('old_cancel'), codec.encode({ v: 1, id: 'call-old' }), { timeout: 300 }).catch(() => undefined);
    const reply = await nc.request(subjects.toolCall('old_cancel'), codec.encode({ ...callRequest('old_cancel', {}), callId: 'call-old', sessionId: 'anyone' }), { timeout: 5000, headers: msgpackHeaders() });
    expect(codec.decode(reply.data, reply.headers?.get('Content-Type'))).toMatchObject({ ok: false, error: { code: 'cancelled' } });
    await worker.stop();
  });

  it('cancels a call that is still waiting for a slot without running it', async () => {
    const started = deferred();
    let runs = 0;
    const worker = await startWorker(
      [
        blockingTool(
          'queued',
          () => {},
          () => {
            runs += 1;
            started.resolve();
          },
        ),
      ],
      { maxConcurrency: 1 },
    );
    const tools = client();
    const blocker = new AbortController();
    const first = tools.call(callRequest('queued', {}), { signal: blocker.signal });
    await started.promise;
    const waiting = new AbortController();
    const second = tools.call(callRequest('queued', {}), { signal: waiting.signal });
    await new Promise((resolve) => setTimeout(resolve, 50));
    waiting.abort(new Error('never mind'));
    await expect(second).rejects.toThrow('never mind');
    blocker.abort(new Error('done'));
    await expect(first).rejects.toThrow('done');
    expect(runs).toBe(1);
    await worker.stop();
  });
});

describe('tool discovery', () => {
  it('announces each tool on $SRV with its description, JSON Schema, tier, timeout and idempotency', async () => {
    const worker = await startWorker([echo]);
    const instances = await discoverServices(nc, 'agentbus-tools', { timeoutMs: 1000 });
    const instance = instances.find((candidate) => candidate.id === worker.id);
    expect(instance?.metadata).toMatchObject({ prefix: 'wt' });
    const endpoint = instance?.endpoints.find((candidate) => candidate.name === 'echo');
    expect(endpoint).toMatchObject({
      subject: 'wt.tools.echo.call',
      queue_group: 'wt.tools.echo',
      metadata: { description: 'Returns its text', tier: 'read_only', timeoutMs: '2000', idempotent: 'true' },
    });
    expect(JSON.parse(endpoint!.metadata['parameters']!)).toMatchObject({
      type: 'object',
      properties: { text: { type: 'string' } },
      required: ['text'],
    });
    await worker.stop();
  });

  it('counts calls and errors in $SRV.STATS', async () => {
    const worker = await startWorker([echo]);
    const tools = client();
    await tools.call(callRequest('echo', { text: 'a' }), {});
    await tools.call(callRequest('echo', {}), {});
    const message = await nc.request(`$SRV.STATS.agentbus-tools.${worker.id}`, new Uint8Array(), { timeout: 1000 });
    const stats = JSON.parse(new TextDecoder().decode(message.data)) as { endpoints: Array<Record<string, unknown>> };
    expect(stats.endpoints[0]).toMatchObject({ name: 'echo', num_requests: 2, num_errors: 1 });
    expect(String(stats.endpoints[0]?.['last_error'])).toMatch(/^invalid_arguments/);
    await worker.stop();
  });

  it('tells in $SRV.STATS no secret a tool error carried, and none of the secrets the host configured', async () => {
    const configured = 'worker-own-password-4711';
    const leaky = defineTool({
      name: 'push',
      description: 'fails with what it had',
      parameters: z.object({}),
      tier: SafetyTier.readOnly,
      timeoutMs: 1000,
      idempotent: true,
      execute: () => {
        throw new Error(`git push failed: https://x-access-token:ghp_${'a1B2c3D4e5'.repeat(3)}123456@github.com/acme/app.git (password ${configured})${' and more'.repeat(200)}`);
      },
    });
    const worker = createToolWorker({ nc, subjects, codec, logger, tools: [leaky], version: '0.1.0', scrubber: createScrubber({ secrets: [configured] }) });
    await worker.start();
    expect(await client().call(callRequest('push', {}), {})).toMatchObject({ ok: false, error: { code: 'tool_failed' } });
    const message = await nc.request(`$SRV.STATS.agentbus-tools.${worker.id}`, new Uint8Array(), { timeout: 1000 });
    const lastError = String((JSON.parse(new TextDecoder().decode(message.data)) as { endpoints: Array<Record<string, unknown>> }).endpoints[0]?.['last_error']);
    expect(lastError).toMatch(/^tool_failed: git push failed: https:\/\/x-access-token:\[REDACTED/);
    expect(lastError).not.toContain('ghp_');
    expect(lastError).not.toContain(configured);
    expect(lastError.length).toBeLessThanOrEqual(520);
    await worker.stop();
  });

  it('lists a tool while a worker serves it and drops it after the worker stops', async () => {
    const tools = client();
    const worker = await startWorker([echo]);
    expect(await tools.listTools({})).toContainEqual({
      name: 'echo',
      description: 'Returns its text',
      parameters: expect.objectContaining({ type: 'object' }),
      tier: 'read_only',
      timeoutMs: 2000,
      idempotent: true,
      // Its worker sends heartbeats every second; a read-only tool has nothing for a result ledger.
      heartbeatMs: 1000,
      ledger: false,
    });
    await worker.stop();
    expect((await tools.listTools({})).map((tool) => tool.name)).not.toContain('echo');
  });
});

describe('tool worker stop', () => {
  it('lets a running call finish within the grace period', async () => {
    const started = deferred();
    const quick = plainTool('finishing', 'Takes 50 ms', 2000, async () => {
      started.resolve();
      await new Promise((resolve) => setTimeout(resolve, 50));
      return 'finished';
    });
    const worker = await startWorker([quick]);
    const pending = client().call(callRequest('finishing', {}), {});
    await started.promise;
    await worker.stop();
    expect(await pending).toMatchObject({ ok: true, output: 'finished' });
  });

  it('aborts a call still running after the grace period and answers cancelled', async () => {
    const started = deferred();
    const stuck = blockingTool('stuck', () => {}, started.resolve);
    const worker = await startWorker([stuck]);
    const pending = client().call(callRequest('stuck', {}), {});
    await started.promise;
    const stopping = Date.now();
    await worker.stop();
    expect(Date.now() - stopping).toBeGreaterThanOrEqual(150);
    expect(await pending).toMatchObject({ ok: false, error: { code: 'cancelled' } });
  });

  it('answers a call still waiting for a slot when the grace period ends with a retryable no_responders: it never ran', async () => {
    const started = deferred();
    let runs = 0;
    const single = blockingTool('single_slot', () => {}, () => {
      runs += 1;
      started.resolve();
    });
    const worker = await startWorker([single], { maxConcurrency: 1 });
    const tools = client();
    const running = tools.call(callRequest('single_slot', {}), {});
    await started.promise;
    const waiting = tools.call(callRequest('single_slot', {}), {});
    await new Promise((resolve) => setTimeout(resolve, 100));
    await worker.stop();
    expect(await running).toMatchObject({ ok: false, error: { code: 'cancelled' } });
    expect(await waiting).toMatchObject({ ok: false, error: { code: 'no_responders', retryable: true } });
    expect(runs).toBe(1);
  });
});
