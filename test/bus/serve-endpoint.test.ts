import { afterEach, describe, expect, it } from 'vitest';
import { headers as createHeaders } from '@nats-io/nats-core';
import type { Subscription } from '@nats-io/nats-core';
import { pino } from 'pino';
import { z } from 'zod';
import { createReplyGuard } from '../../src/bus/reply-guard.ts';
import { serveEndpoint } from '../../src/bus/serve-endpoint.ts';
import type { EndpointOutcome } from '../../src/bus/service-registry.ts';
import { AgentbusError, ErrorCode } from '../../src/errors.ts';
import type { Refusal } from '../../src/refusal-log.ts';
import { createCodec } from '../../src/protocol/index.ts';
import { useNatsServer } from '../helpers/nats-fixture.ts';

// The one request pipeline every host serves through, against a real nats-server: decode by Content-Type,
// validate, handle, msgpack reply, stats, typed refusals, and the reply-subject rule.

const nats = useNatsServer();
const codec = createCodec();
const logger = pino({ level: 'silent' });
const schema = z.object({ a: z.number(), b: z.number() });

let subscription: Subscription | undefined;
afterEach(() => subscription?.unsubscribe());

/** Serves `sum.<tenant>` with a sealed reply policy; returns what it handled, refused and counted. */
function serveSum(extra: { admit?: () => void; emptyBody?: unknown } = {}) {
  const handled: Array<{ a: number; b: number }> = [];
  const refused: Refusal[] = [];
  const recorded: Array<{ endpoint: string; outcome: EndpointOutcome }> = [];
  const refusals = { refused: (refusal: Refusal) => refused.push(refusal) };
  subscription = serveEndpoint({
    nc: nats.nc,
    codec,
    logger,
    name: 'sum',
    subject: 'sum.*',
    queue: 'sum',
    schema,
    replies: createReplyGuard({ policy: { open: false, trusted: ['_INBOX_test'] }, refusals }),
    tenantOf: (subject) => subject.split('.')[1],
    refusals,
    stats: { record: (endpoint, outcome) => recorded.push({ endpoint, outcome }) },
    ...extra,
    handle: (request) => {
      handled.push(request);
      if (request.a < 0) throw new Error('negative numbers break the adder');
      return { sum: request.a + request.b };
    },
  });
  return { handled, refused, recorded };
}

/** A request whose reply comes back on `inbox` (the server lets any reply subject through). */
async function ask(subject: string, data: Uint8Array, inbox: string, contentType?: string): Promise<unknown> {
  const reply = `${inbox}.${Math.random().toString(36).slice(2)}`;
  const answers = nats.nc.subscribe(reply, { max: 1, timeout: 2_000 });
  const headers = createHeaders();
  if (contentType) headers.set('Content-Type', contentType);
  nats.nc.publish(subject, data, { reply, headers });
  for await (const message of answers) {
    expect(message.headers?.get('Content-Type')).toBe('application/msgpack');
    return codec.decode(message.data, 'application/msgpack');
  }
  return undefined;
}

describe('serveEndpoint', () => {
  it('answers a valid request in msgpack, whether it came as msgpack or as JSON, and counts it', async () => {
    const { recorded } = serveSum();
    await nats.nc.flush();
    expect(await ask('sum.acme', codec.encode({ a: 2, b: 3 }), '_INBOX_acme')).toEqual({ sum: 5 });
    expect(await ask('sum.acme', new TextEncoder().encode('{"a":1,"b":1}'), '_INBOX_test', 'application/json')).toEqual({ sum: 2 });
    expect(recorded.map(({ endpoint, outcome }) => [endpoint, outcome.error])).toEqual([
      ['sum', undefined],
      ['sum', undefined],
    ]);
  });

  it('refuses bad input with a typed error reply, logs it as a refusal and counts it as an error, without calling the handler', async () => {
    const { handled, refused, recorded } = serveSum();
    await nats.nc.flush();
    expect(await ask('sum.acme', codec.encode({ a: 'two' }), '_INBOX_acme')).toEqual({ error: expect.objectContaining({ code: 'invalid_input', retryable: false }) });
    expect(await ask('sum.acme', new TextEncoder().encode('{not json'), '_INBOX_acme', 'application/json')).toEqual({ error: expect.objectContaining({ code: 'invalid_input', message: expect.stringContaining('malformed JSON') }) });
    expect(handled).toEqual([]);
    expect(refused.map((refusal) => refusal.code)).toEqual(['invalid_input', 'invalid_input']);
    expect(recorded.every(({ outcome }) => outcome.error?.startsWith('invalid_input: '))).toBe(true);
  });

  it('answers a failing handler with an internal error, logged rather than refused', async () => {
    const { handled, refused } = serveSum();
    await nats.nc.flush();
    expect(await ask('sum.acme', codec.encode({ a: -1, b: 1 }), '_INBOX_acme')).toEqual({ error: expect.objectContaining({ code: 'internal' }) });
    expect(handled).toHaveLength(1);
    expect(refused).toEqual([]);
  });

  it('drops whole a request whose reply subject lies under no inbox its requester may own', async () => {
    const { handled, refused, recorded } = serveSum();
    const target = nats.nc.subscribe('$KV.STATE.globex.k', { max: 1 });
    await nats.nc.flush();
    nats.nc.publish('sum.acme', codec.encode({ a: 1, b: 1 }), { reply: '$KV.STATE.globex.k' });
    // Another tenant's inbox is refused alike; then an honest request shows the refused ones were seen first.
    nats.nc.publish('sum.acme', codec.encode({ a: 1, b: 1 }), { reply: '_INBOX_globex.x' });
    expect(await ask('sum.acme', codec.encode({ a: 4, b: 4 }), '_INBOX_acme')).toEqual({ sum: 8 });
    expect(handled).toEqual([{ a: 4, b: 4 }]);
    expect(refused.map((refusal) => refusal.code)).toEqual(['denied', 'denied']);
    expect(recorded).toHaveLength(1);
    expect(target.getProcessed()).toBe(0);
    target.unsubscribe();
  });

  it('refuses in admit before decoding, and reads an empty body as emptyBody', async () => {
    let admitted = 0;
    const { handled } = serveSum({
      emptyBody: { a: 0, b: 0 },
      admit: () => {
        admitted += 1;
        if (admitted === 2) throw new AgentbusError(ErrorCode.rateLimited, 'slow down', { retryable: true });
      },
    });
    await nats.nc.flush();
    expect(await ask('sum.acme', new Uint8Array(), '_INBOX_acme')).toEqual({ sum: 0 });
    expect(await ask('sum.acme', codec.encode({ a: 1, b: 2 }), '_INBOX_acme')).toEqual({ error: expect.objectContaining({ code: 'rate_limited' }) });
    expect(handled).toEqual([{ a: 0, b: 0 }]);
  });
});
