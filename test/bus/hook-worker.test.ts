import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { pino } from 'pino';
import { headers } from '@nats-io/nats-core';
import type { Msg } from '@nats-io/nats-core';
import { AgentbusError } from '../../src/errors.ts';
import { createHookClient } from '../../src/bus/hook-client.ts';
import { discoverServices } from '../../src/bus/service-discovery.ts';
import { createToolClient } from '../../src/bus/tool-client.ts';
import { createCodec, createSubjects } from '../../src/protocol/index.ts';
import type { AfterHookRequest, BeforeHookRequest } from '../../src/protocol/index.ts';
import { createHookWorker } from '../../src/tool-sdk/index.ts';
import type { HookWorker } from '../../src/tool-sdk/index.ts';
import { useNatsServer } from '../helpers/nats-fixture.ts';

// The TypeScript hook SDK and the runtime's hook client, against a real nats-server; and hooks as another language
// writes them: raw subscriptions that answer JSON.

const nats = useNatsServer();
const logger = pino({ level: 'silent' });
const codec = createCodec();
const subjects = createSubjects('hk');
const json = (body: unknown) => new TextEncoder().encode(JSON.stringify(body));
const jsonHeaders = () => {
  const result = headers();
  result.set('Content-Type', 'application/json');
  return result;
};

const before = (args: unknown, overrides: Partial<BeforeHookRequest> = {}): BeforeHookRequest => ({
  v: 1,
  callId: 'c1',
  effectId: 's:t:c1',
  name: 'write_file',
  args,
  tier: 'side_effecting',
  tenant: 'acme',
  sessionId: 's',
  turnId: 't',
  deadline: Date.now() + 5000,
  ...overrides,
});
const after = (output: string, overrides: Partial<AfterHookRequest> = {}): AfterHookRequest => ({ ...before({ path: 'a' }), output, isError: false, ...overrides });
const options = (timeoutMs = 2000) => ({ signal: new AbortController().signal, timeoutMs });

let worker: HookWorker;
const seen: Array<{ request: BeforeHookRequest | AfterHookRequest; aborted: () => boolean }> = [];
let slowAborted: Promise<unknown> | undefined;

beforeAll(async () => {
  worker = createHookWorker({
    nc: nats.nc,
    subjects,
    codec,
    logger,
    name: 'policy',
    version: '1.2.3',
    before: async (request, { signal }) => {
      seen.push({ request, aborted: () => signal.aborted });
      const args = request.args as { path?: string; mode?: string };
      if (args.mode === 'throw') throw new AgentbusError('policy_store_down', 'the policy store is unreachable', { retryable: true });
      if (args.mode === 'crash') throw new Error('bug in the hook');
      if (args.mode === 'bad') return { action: 'continue', args: ['not', 'an', 'object'] } as never;
      if (args.mode === 'slow') {
        // A handler that does not stop when told: its reply still goes out at the deadline.
        slowAborted = new Promise((resolve) => signal.addEventListener('abort', () => resolve(signal.reason)));
        await new Promise((resolve) => setTimeout(resolve, 1500));
      }
      if (args.path?.startsWith('/etc')) return { action: 'block', output: `writing ${args.path} is not allowed` };
      if (args.path && !args.path.startsWith('sandbox/')) return { action: 'continue', args: { ...args, path: `sandbox/${args.path}` } };
      return { action: 'continue' };
    },
    after: (request) => (request.output.includes('555') ? { action: 'continue', output: request.output.replace(/555-\d{4}/g, '[phone]') } : { action: 'continue' }),
  });
  await worker.start();
});

afterAll(() => worker?.stop());

describe('a hook worker of the SDK, asked through the hook client', () => {
  it('continues, rewrites arguments or blocks, as its handler decides', async () => {
    const client = createHookClient({ nc: nats.nc, subjects, codec, logger });
    expect(await client.before('policy', before({ path: 'sandbox/a' }), options())).toEqual({ ok: true, reply: { v: 1, callId: 'c1', action: 'continue' } });
    expect(await client.before('policy', before({ path: 'a' }), options())).toEqual({ ok: true, reply: { v: 1, callId: 'c1', action: 'continue', args: { path: 'sandbox/a' } } });
    expect(await client.before('policy', before({ path: '/etc/passwd' }), options())).toEqual({
      ok: true,
      reply: { v: 1, callId: 'c1', action: 'block', output: 'writing /etc/passwd is not allowed' },
    });
    expect(seen.at(-1)?.request).toMatchObject({ name: 'write_file', tier: 'side_effecting', tenant: 'acme', sessionId: 's', turnId: 't', effectId: 's:t:c1' });
  });

  it('rewrites a result after the call', async () => {
    const client = createHookClient({ nc: nats.nc, subjects, codec, logger });
    expect(await client.after('policy', after('call Ada at 555-0100'), options())).toEqual({ ok: true, reply: { v: 1, callId: 'c1', action: 'continue', output: 'call Ada at [phone]' } });
    expect(await client.after('policy', after('nothing to hide'), options())).toEqual({ ok: true, reply: { v: 1, callId: 'c1', action: 'continue' } });
  });

  it('answers its handler’s failure as { error }: the code of an AgentbusError, internal for anything else or an invalid decision', async () => {
    const client = createHookClient({ nc: nats.nc, subjects, codec, logger });
    expect(await client.before('policy', before({ mode: 'throw' }), options())).toEqual({
      ok: false,
      error: { code: 'policy_store_down', message: 'the policy store is unreachable', retryable: true },
    });
    expect(await client.before('policy', before({ mode: 'crash' }), options())).toEqual({ ok: false, error: { code: 'internal', message: 'bug in the hook', retryable: false } });
    expect(await client.before('policy', before({ mode: 'bad' }), options())).toMatchObject({
      ok: false,
      error: { code: 'internal', message: expect.stringContaining('the before hook returned an invalid decision: args: ') },
    });
  });

  it('takes a JSON request, as another language sends it, and refuses a malformed one with invalid_input', async () => {
    const reply = await nats.nc.request(subjects.toolHook('policy', 'before'), json(before({ path: 'b' })), { timeout: 2000, headers: jsonHeaders() });
    expect(reply.headers?.get('Content-Type')).toBe('application/msgpack');
    expect(codec.decode(reply.data, 'application/msgpack')).toEqual({ v: 1, callId: 'c1', action: 'continue', args: { path: 'sandbox/b' } });
    const refused = await nats.nc.request(subjects.toolHook('policy', 'after'), json({ v: 1, callId: 'c9', name: 'x' }), { timeout: 2000, headers: jsonHeaders() });
    expect(codec.decode(refused.data)).toMatchObject({ v: 1, callId: 'c9', error: { code: 'invalid_input', message: expect.stringContaining('invalid after hook request'), retryable: false } });
  });

  it('times out in the client at its limit, and the handler’s signal aborts at the request deadline', async () => {
    const client = createHookClient({ nc: nats.nc, subjects, codec, logger });
    const started = Date.now();
    const answer = await client.before('policy', before({ mode: 'slow' }, { deadline: Date.now() + 300 }), options(300));
    // Whichever comes first: the client's wait running out, or the worker answering `timeout` at the deadline (a
    // millisecond earlier by its own clock, on a loaded machine).
    expect(answer).toEqual({
      ok: false,
      error: { code: 'timeout', message: expect.stringMatching(/^(no answer on hk\.hooks\.policy\.before within 300 ms|the before hook ran past the caller's deadline \(\d+ ms\))$/), retryable: true },
    });
    expect(Date.now() - started).toBeLessThan(2000);
    await expect(slowAborted).resolves.toMatchObject({ code: 'timeout' });
  });

  it('is announced on $SRV with an endpoint per phase in the hook’s queue group, and is no tool', async () => {
    const instances = await discoverServices(nats.nc, 'agentbus-hooks', { timeoutMs: 1000, codec, logger });
    const instance = instances.find((found) => found.id === worker.id);
    expect(instance).toMatchObject({ name: 'agentbus-hooks', version: '1.2.3', metadata: { prefix: 'hk' } });
    expect(instance?.endpoints).toEqual([
      { name: 'policy-before', subject: 'hk.hooks.policy.before', queue_group: 'hk.hooks.policy', metadata: { hook: 'policy', phase: 'before' } },
      { name: 'policy-after', subject: 'hk.hooks.policy.after', queue_group: 'hk.hooks.policy', metadata: { hook: 'policy', phase: 'after' } },
    ]);
    expect(await createToolClient({ nc: nats.nc, subjects, codec, logger }).listTools({})).toEqual([]);
  });
});

describe('the hook client against hooks in another language', () => {
  /** A raw responder on a hook subject, as a Python hook is: it answers `body` with `contentType`. */
  function rawHook(hook: string, phase: 'before' | 'after', answer: (request: Msg) => { body: Uint8Array; contentType?: string } | undefined) {
    return nats.nc.subscribe(subjects.toolHook(hook, phase), {
      queue: subjects.toolHookQueue(hook),
      callback: (_error, message) => {
        const reply = answer(message);
        if (!reply) return;
        const replyHeaders = headers();
        if (reply.contentType) replyHeaders.set('Content-Type', reply.contentType);
        message.respond(reply.body, { headers: replyHeaders });
      },
    });
  }

  it('reads a JSON reply by its Content-Type', async () => {
    const received: unknown[] = [];
    const subscription = rawHook('py', 'before', (message) => {
      received.push(codec.decode(message.data, message.headers?.get('Content-Type')));
      return { body: json({ v: 1, action: 'block', output: 'blocked from Python', isError: false }), contentType: 'application/json' };
    });
    const client = createHookClient({ nc: nats.nc, subjects, codec, logger });
    expect(await client.before('py', before({ path: 'a' }), options())).toEqual({ ok: true, reply: { v: 1, action: 'block', output: 'blocked from Python', isError: false } });
    expect(received).toEqual([expect.objectContaining({ v: 1, callId: 'c1', args: { path: 'a' } })]);
    subscription.unsubscribe();
  });

  it.each([
    ['not JSON at all', { body: json('x').subarray(0, 2), contentType: 'application/json' }, 'malformed reply: malformed JSON'],
    ['a misspelt field', { body: json({ v: 1, action: 'continue', arg: { path: 'x' } }), contentType: 'application/json' }, 'malformed reply: invalid before hook reply: Unrecognized key: "arg"'],
    ['arguments that are no object', { body: json({ v: 1, action: 'continue', args: 'rm -rf /' }), contentType: 'application/json' }, 'malformed reply: invalid before hook reply: args: '],
    ['an unknown action', { body: json({ v: 1, action: 'allow' }), contentType: 'application/json' }, 'malformed reply: invalid before hook reply: action: '],
    ['a reply of v2', { body: codec.encode({ v: 2, action: 'continue' }), contentType: 'application/msgpack' }, 'malformed reply: invalid before hook reply: v: '],
    ['an error without a code', { body: json({ v: 1, error: { message: 'down' } }), contentType: 'application/json' }, 'malformed reply: invalid before hook reply: error.code: '],
  ])('answers invalid_input for a malformed reply: %s', async (_, reply, message) => {
    const subscription = rawHook('broken', 'before', () => reply);
    const answer = await createHookClient({ nc: nats.nc, subjects, codec, logger }).before('broken', before({}), options());
    expect(answer).toMatchObject({ ok: false, error: { code: 'invalid_input', message: expect.stringContaining(message), retryable: false } });
    subscription.unsubscribe();
  });

  it('passes on a hook’s own error, and says no_responders when no hook process listens', async () => {
    const subscription = rawHook('erring', 'after', () => ({ body: json({ v: 1, error: { code: 'quota', message: 'over quota', retryable: true } }), contentType: 'application/json' }));
    const client = createHookClient({ nc: nats.nc, subjects, codec, logger });
    expect(await client.after('erring', after('x'), options())).toEqual({ ok: false, error: { code: 'quota', message: 'over quota', retryable: true } });
    subscription.unsubscribe();
    expect(await client.before('nobody', before({}), options())).toEqual({ ok: false, error: { code: 'no_responders', message: 'no hook process answers on hk.hooks.nobody.before', retryable: true } });
  });

  it('rejects with the abort reason when its signal aborts, and drops the late reply', async () => {
    const subscription = rawHook('late', 'before', (message) => {
      setTimeout(() => message.respond(json({ v: 1, action: 'continue' })), 300);
      return undefined;
    });
    const controller = new AbortController();
    const pending = createHookClient({ nc: nats.nc, subjects, codec, logger }).before('late', before({}), { signal: controller.signal, timeoutMs: 2000 });
    setTimeout(() => controller.abort(new Error('turn cancelled')), 50);
    await expect(pending).rejects.toThrow('turn cancelled');
    await new Promise((resolve) => setTimeout(resolve, 400));
    subscription.unsubscribe();
  });
});

describe('hook workers side by side', () => {
  it('share a hook’s requests through its queue group', async () => {
    const counts = [0, 0];
    const workers = counts.map((_, index) =>
      createHookWorker({ nc: nats.nc, subjects, codec, logger, name: 'shared', version: '1.0.0', before: () => ((counts[index]! += 1), { action: 'continue' }) }),
    );
    await Promise.all(workers.map((each) => each.start()));
    const client = createHookClient({ nc: nats.nc, subjects, codec, logger });
    await Promise.all(Array.from({ length: 40 }, (_, index) => client.before('shared', before({}, { callId: `c${index}` }), options())));
    expect(counts[0]! + counts[1]!).toBe(40);
    expect(counts.every((count) => count > 0)).toBe(true);
    await Promise.all(workers.map((each) => each.stop()));
  });

  it('refuses to be made without a handler', () => {
    expect(() => createHookWorker({ nc: nats.nc, subjects, codec, logger, name: 'idle', version: '1.0.0' })).toThrow('hook idle has neither a before nor an after handler');
  });
});
