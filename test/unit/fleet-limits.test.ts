import { describe, expect, it } from 'vitest';
import { createCodec } from '../../src/protocol/index.ts';
import type { GenerateChunk, GenerateRequest } from '../../src/protocol/index.ts';
import { createLogger } from '../../src/logging.ts';
import { createFleetLimits, modelKey } from '../../services/runtime/limits/fleet-limits.ts';
import { createLimitCells } from '../../services/runtime/limits/limit-cells.ts';
import type { CellStore } from '../../services/runtime/limits/limit-cells.ts';
import { limitProvider } from '../../services/runtime/limits/limited-provider.ts';
import { limitsFromEnv, parseRateLimits, parseSpendLimits } from '../../services/runtime/limits/limits-config.ts';
import type { LimitsConfig } from '../../services/runtime/limits/limits-config.ts';
import { periodAt, rateDecision, reserveSpend, settleSpend, timeUntilRoom } from '../../services/runtime/limits/windows.ts';

const codec = createCodec();
const logger = createLogger({ name: 'test', level: 'silent' });

/** A key-value store with JetStream's compare-and-set rules: a write names the revision it expects. */
function memoryStore(): CellStore & { writes: number } {
  const entries = new Map<string, { bytes: Uint8Array; revision: number }>();
  let sequence = 0;
  const conflict = () => new Error('wrong last sequence: 1');
  const store = {
    writes: 0,
    async get(key: string) {
      return entries.get(key);
    },
    async create(key: string, bytes: Uint8Array) {
      if (entries.has(key)) throw conflict();
      store.writes += 1;
      entries.set(key, { bytes, revision: ++sequence });
      return sequence;
    },
    async update(key: string, bytes: Uint8Array, revision: number) {
      if (entries.get(key)?.revision !== revision) throw conflict();
      store.writes += 1;
      entries.set(key, { bytes, revision: ++sequence });
      return sequence;
    },
  };
  return store;
}

const NOV_29 = Date.UTC(2026, 10, 29, 12, 0, 0);

describe('spend periods', () => {
  it('name the UTC day and month and when each resets', () => {
    expect(periodAt('day', NOV_29)).toEqual({ id: '2026-11-29', resetsAt: Date.UTC(2026, 10, 30) });
    expect(periodAt('month', NOV_29)).toEqual({ id: '2026-11', resetsAt: Date.UTC(2026, 11, 1) });
    expect(periodAt('month', Date.UTC(2026, 11, 31, 23, 59))).toEqual({ id: '2026-12', resetsAt: Date.UTC(2027, 0, 1) });
  });

  it('reserve while spent plus holds are under the limit, and settle the actual cost, giving the hold back', () => {
    const now = NOV_29;
    let value = reserveSpend(undefined, { period: '2026-11-29', node: 'a', amount: 0.4, until: now + 1000, now, limit: 1 })!;
    value = reserveSpend(value, { period: '2026-11-29', node: 'b', amount: 0.4, until: now + 1000, now, limit: 1 })!;
    expect(value.holds).toEqual({ a: { amount: 0.4, until: now + 1000 }, b: { amount: 0.4, until: now + 1000 } });
    // 0.8 held of 1: room for one more; then none.
    value = reserveSpend(value, { period: '2026-11-29', node: 'a', amount: 0.4, until: now + 1000, now, limit: 1 })!;
    expect(value.holds.a!.amount).toBeCloseTo(0.8);
    expect(reserveSpend(value, { period: '2026-11-29', node: 'b', amount: 0.4, until: now + 1000, now, limit: 1 })).toBeUndefined();
    value = settleSpend(value, { period: '2026-11-29', reservedIn: '2026-11-29', node: 'a', reserved: 0.4, cost: 0.1, now });
    expect(value.spent).toBeCloseTo(0.1);
    expect(value.holds.a!.amount).toBeCloseTo(0.4);
  });

  it('drop a hold whose node never settled once it lapses, and start a new period empty', () => {
    const now = NOV_29;
    const held = reserveSpend(undefined, { period: '2026-11-29', node: 'dead', amount: 5, until: now + 1000, now, limit: 5 })!;
    expect(reserveSpend(held, { period: '2026-11-29', node: 'b', amount: 1, until: now + 1000, now, limit: 5 })).toBeUndefined();
    const later = reserveSpend(held, { period: '2026-11-29', node: 'b', amount: 1, until: now + 5000, now: now + 1001, limit: 5 })!;
    expect(Object.keys(later.holds)).toEqual(['b']);
    const spent = settleSpend(undefined, { period: '2026-11-29', reservedIn: '2026-11-29', node: 'b', reserved: 0, cost: 5, now });
    expect(reserveSpend(spent, { period: '2026-11-30', node: 'b', amount: 1, until: now + 1000, now, limit: 5 })).toMatchObject({ period: '2026-11-30', spent: 0 });
  });
});

describe('rate windows', () => {
  const minute = 60_000;
  it('let N requests through a window and make the next wait for the next one', () => {
    const start = 100 * minute;
    expect(timeUntilRoom(2, 0, 1, 1, start + 1000, minute)).toBe(0);
    // Two in this window already, none before: room when this window's weight has fallen to one, half-way into the next.
    expect(timeUntilRoom(2, 0, 2, 1, start + 1000, minute)).toBe(minute - 1000 + minute / 2);
    // Two in the previous window: room once half of it has slid out of the last minute.
    expect(timeUntilRoom(2, 2, 0, 1, start + 1000, minute)).toBe(minute / 2 - 1000);
    expect(timeUntilRoom(2, 2, 0, 1, start + minute / 2, minute)).toBe(0);
    expect(timeUntilRoom(2, 0, 0, 3, start, minute)).toBe(Infinity);
  });

  it('decide on requests and tokens together, naming the figure that binds', () => {
    const now = 100 * 60_000 + 10;
    const limit = { requests: 10, tokens: 1000, windowMs: 60_000 };
    expect(rateDecision(limit, [{ index: 100, requests: 1, tokens: 900 }, undefined], 50, now)).toEqual({ waitMs: 0 });
    expect(rateDecision(limit, [{ index: 100, requests: 1, tokens: 900 }, undefined], 200, now)).toMatchObject({ binding: 'tokens' });
    // A slot holding a window two back counts as empty.
    expect(rateDecision(limit, [{ index: 98, requests: 10, tokens: 1000 }, undefined], 200, now)).toEqual({ waitMs: 0 });
  });
});

describe('limit configuration', () => {
  it('reads rates and spend from the environment, and names a bad entry', () => {
    expect(parseRateLimits('openai:gpt-5.4-mini=500rpm,200000tpm; anthropic:*=50rpm')).toEqual([
      { model: 'openai:gpt-5.4-mini', requestsPerMinute: 500, tokensPerMinute: 200000 },
      { model: 'anthropic:*', requestsPerMinute: 50 },
    ]);
    expect(parseSpendLimits('acme=5/day,100/month *=20/month')).toEqual([{ tenant: 'acme', day: 5, month: 100 }, { tenant: '*', month: 20 }]);
    expect(() => parseRateLimits('gpt=5rpm')).toThrow(/AGENTBUS_RATE_LIMITS entry "gpt=5rpm"/);
    expect(() => parseSpendLimits('acme=5/week')).toThrow(/must be <usd>\/day or <usd>\/month/);
    expect(limitsFromEnv({})).toBeUndefined();
    expect(limitsFromEnv({ AGENTBUS_SPEND_LIMITS: 'acme=1/day', AGENTBUS_RATE_MAX_WAIT_MS: '500' })).toEqual({ rates: [], spend: [{ tenant: 'acme', day: 1 }], rateMaxWaitMs: 500 });
  });

  it('makes model names bucket keys, one token per part', () => {
    expect(modelKey('openai:gpt-5.4-mini')).toBe('openai.gpt-5=2E4-mini');
    expect(modelKey('anthropic:*')).toBe('anthropic.=2A');
  });
});

function fleet(config: LimitsConfig, store: CellStore, clock: { now: number }, nodeId: string) {
  return createFleetLimits({ cells: createLimitCells({ store, codec }), config, nodeId, now: () => clock.now, holdMs: 60_000 });
}

describe('fleet limits over one store', () => {
  const config: LimitsConfig = { rates: [{ model: 'scripted:default', requestsPerMinute: 3 }], rateMaxWaitMs: 60_000, spend: [{ tenant: 'acme', day: 1 }] };

  it('count requests of two nodes in one window: the fourth waits, whichever node asks', async () => {
    const store = memoryStore();
    const clock = { now: NOV_29 };
    const a = fleet(config, store, clock, 'a');
    const b = fleet(config, store, clock, 'b');
    for (const node of [a, b, a]) expect(await node.acquire({ model: 'scripted:default', tokens: 10 })).toHaveProperty('ticket');
    const wait = await b.acquire({ model: 'scripted:default', tokens: 10 });
    expect(wait).toMatchObject({ waitMs: expect.any(Number), message: expect.stringMatching(/scripted:default is at its fleet-wide limit of 3 requests per minute/) });
    // Once the wait has passed, the call goes through.
    clock.now += (wait as { waitMs: number }).waitMs;
    expect(await b.acquire({ model: 'scripted:default', tokens: 10 })).toHaveProperty('ticket');
  });

  it('refuse a tenant past its spend with the period, the limit and the reset, on every node; another tenant goes on', async () => {
    const store = memoryStore();
    const clock = { now: NOV_29 };
    const a = fleet(config, store, clock, 'a');
    const b = fleet(config, store, clock, 'b');
    const first = await a.acquire({ tenant: 'acme', model: 'other:x', tokens: 1 });
    if (!('ticket' in first)) throw new Error('refused');
    await a.settle(first.ticket, { cost: 0.6, tokens: 1 });
    await b.checkPrompt('acme');
    const second = await b.acquire({ tenant: 'acme', model: 'other:x', tokens: 1 });
    if (!('ticket' in second)) throw new Error('refused');
    await b.settle(second.ticket, { cost: 0.6, tokens: 1 });
    for (const node of [a, b]) {
      await expect(node.checkPrompt('acme')).rejects.toMatchObject({
        code: 'spend_limit_exceeded',
        period: 'day',
        limit: 1,
        message: expect.stringMatching(/tenant acme has reached its daily spend limit of 1 USD \(AGENTBUS_SPEND_LIMITS\): 1\.2 USD spent this day; it resets at 2026-11-30T00:00:00\.000Z/),
      });
      await expect(node.acquire({ tenant: 'acme', model: 'other:x', tokens: 1 })).rejects.toMatchObject({ code: 'spend_limit_exceeded' });
    }
    await a.checkPrompt('globex');
    expect(await a.acquire({ tenant: 'globex', model: 'other:x', tokens: 1 })).toHaveProperty('ticket');
    // The next day starts empty.
    clock.now += 24 * 60 * 60_000;
    await b.checkPrompt('acme');
  });

  it('let two nodes racing for the last of a budget pass it by at most one estimate', async () => {
    const store = memoryStore();
    const clock = { now: NOV_29 };
    const a = fleet(config, store, clock, 'a');
    const b = fleet(config, store, clock, 'b');
    // Each node has seen a call of the model cost 0.3: that is what it reserves for the next.
    for (const node of [a, b]) {
      const outcome = await node.acquire({ tenant: 'acme', model: 'other:x', tokens: 1 });
      if (!('ticket' in outcome)) throw new Error('refused');
      await node.settle(outcome.ticket, { cost: 0.3, tokens: 1 });
    }
    // 0.6 spent: a reserves 0.3 (0.9 committed), b reserves 0.3 (1.2), a third call anywhere is refused before it is made.
    const racing = await Promise.all([a.acquire({ tenant: 'acme', model: 'other:x', tokens: 1 }), b.acquire({ tenant: 'acme', model: 'other:x', tokens: 1 })]);
    await expect(a.acquire({ tenant: 'acme', model: 'other:x', tokens: 1 })).rejects.toMatchObject({ code: 'spend_limit_exceeded' });
    for (const [index, node] of [a, b].entries()) {
      const outcome = racing[index]!;
      if (!('ticket' in outcome)) throw new Error('refused');
      await node.settle(outcome.ticket, { cost: 0.3, tokens: 1 });
    }
    await expect(b.checkPrompt('acme')).rejects.toMatchObject({ spent: expect.closeTo(1.2, 6) });
  });

  it('costs one write per call on the node that wrote last, and retries a write another node got in first', async () => {
    const store = memoryStore();
    const clock = { now: NOV_29 };
    const a = fleet({ ...config, spend: [] }, store, clock, 'a');
    const b = fleet({ ...config, spend: [] }, store, clock, 'b');
    await a.acquire({ model: 'scripted:default', tokens: 1 });
    const before = store.writes;
    await a.acquire({ model: 'scripted:default', tokens: 1 });
    expect(store.writes - before).toBe(1);
    // b's kept value is stale after a wrote: its write conflicts once, is read again and goes through.
    expect(await b.acquire({ model: 'scripted:default', tokens: 1 })).toHaveProperty('ticket');
  });
});

describe('token limits', () => {
  it("count a call's estimate when it is made and correct it with its usage, in the model's and the provider's limit alike", async () => {
    const store = memoryStore();
    const clock = { now: NOV_29 };
    const config: LimitsConfig = { rates: [{ model: 'openai:gpt-x', tokensPerMinute: 1000 }, { model: 'openai:*', requestsPerMinute: 100, tokensPerMinute: 1500 }], rateMaxWaitMs: 60_000, spend: [] };
    const limits = fleet(config, store, clock, 'a');
    const first = await limits.acquire({ model: 'openai:gpt-x', tokens: 100 });
    if (!('ticket' in first)) throw new Error('refused');
    // It used 900 tokens, not 100: the model's minute is nearly full, its provider's not.
    await limits.settle(first.ticket, { cost: 0, tokens: 900 });
    expect(await limits.acquire({ model: 'openai:gpt-x', tokens: 200 })).toMatchObject({ message: expect.stringMatching(/openai:gpt-x is at its fleet-wide limit of 1000 tokens per minute/) });
    expect(await limits.acquire({ model: 'openai:other', tokens: 200 })).toHaveProperty('ticket');
    expect(await limits.acquire({ model: 'openai:other', tokens: 2000 })).toMatchObject({ waitMs: Infinity, message: expect.stringMatching(/larger than the limit of 1500 tokens per minute \(the limit of openai:\*\)/) });
  });
});

describe('the limited provider port', () => {
  const request: GenerateRequest = { v: 1, requestId: 'r1', model: 'scripted:default', messages: [{ role: 'user', content: 'hi' }], tools: [], tenant: 'acme' };
  const answer = (cost: number): GenerateChunk[] => [
    { v: 1, requestId: 'r1', seq: 0, type: 'usage', usage: { inputTokens: 3, outputTokens: 4 } },
    { v: 1, requestId: 'r1', seq: 1, type: 'done', finishReason: 'stop', cost },
  ];
  const port = (cost: number) => ({
    async *generate() {
      yield* answer(cost);
    },
  });
  const drain = async (iterable: AsyncIterable<GenerateChunk>) => {
    const chunks: GenerateChunk[] = [];
    for await (const chunk of iterable) chunks.push(chunk);
    return chunks;
  };

  it('waits for room with a retry chunk, then calls; fails at once with rate_limited when the wait would pass the deadline or the bound', async () => {
    const store = memoryStore();
    const config: LimitsConfig = { rates: [{ model: 'scripted:*', requestsPerMinute: 1 }], rateMaxWaitMs: 60_000, spend: [] };
    let now = 100 * 60_000 + 59_990;
    const limits = createFleetLimits({ cells: createLimitCells({ store, codec }), config, nodeId: 'a', now: () => now, holdMs: 60_000 });
    const limited = limitProvider(port(0), { limits, maxWaitMs: 60_000, now: () => now, logger });
    const signal = new AbortController().signal;
    const options = { signal, idleTimeoutMs: 1000, timeoutMs: 1000 };
    expect((await drain(limited.generate(request, options))).map((chunk) => chunk.type)).toEqual(['usage', 'done']);
    await expect(drain(limited.generate(request, { ...options, deadline: now + 5 }))).rejects.toMatchObject({ code: 'rate_limited', retryable: false, message: expect.stringMatching(/past the turn's deadline/) });
    const tight = limitProvider(port(0), { limits, maxWaitMs: 5, now: () => now, logger });
    await expect(drain(tight.generate(request, options))).rejects.toMatchObject({ code: 'rate_limited', message: expect.stringMatching(/AGENTBUS_RATE_MAX_WAIT_MS/) });
    // A real wait of 10 ms: the call of the previous window still weighs until its end.
    now += 60_000;
    const iterator = limited.generate(request, options)[Symbol.asyncIterator]();
    const first = await iterator.next();
    expect(first.value).toMatchObject({ type: 'retry', attempt: 2, delayMs: 10, error: { code: 'rate_limited', retryable: true } });
    now += 10;
    const rest: string[] = [];
    for (let next = await iterator.next(); !next.done; next = await iterator.next()) rest.push(next.value.type);
    expect(rest).toEqual(['usage', 'done']);
  });

  it('settles the actual cost after the call, so the next prompt sees it', async () => {
    const store = memoryStore();
    const config: LimitsConfig = { rates: [], rateMaxWaitMs: 0, spend: [{ tenant: 'acme', month: 0.5 }] };
    const limits = createFleetLimits({ cells: createLimitCells({ store, codec }), config, nodeId: 'a', now: () => NOV_29, holdMs: 60_000 });
    const limited = limitProvider(port(0.5), { limits, maxWaitMs: 0, now: () => NOV_29, logger });
    await drain(limited.generate(request, { signal: new AbortController().signal, idleTimeoutMs: 1000, timeoutMs: 1000 }));
    await expect(limits.checkPrompt('acme')).rejects.toMatchObject({ code: 'spend_limit_exceeded', period: 'month', message: expect.stringMatching(/monthly spend limit of 0.5 USD/) });
  });
});
