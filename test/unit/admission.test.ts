import { describe, expect, it } from 'vitest';
import { createAdmission, promptBytes } from '../../services/runtime/ingress/admission.ts';
import { createRateLimiter, parseRate } from '../../src/rate-limit.ts';
import { createRefusalLog } from '../../src/refusal-log.ts';
import { captureLogs } from '../helpers/captured-logs.ts';

describe('admission', () => {
  it('lets a session send its burst, then its rate, and refuses the rest with a retryable rate_limited', () => {
    let now = 0;
    const admission = createAdmission({ maxPromptBytes: 0, sessionRate: { perSecond: 2, burst: 3 }, tenantRate: { perSecond: 0, burst: 0 } }, () => now);
    const results = Array.from({ length: 5 }, () => admission.session('acme', 's1'));
    expect(results.filter((refusal) => refusal === undefined)).toHaveLength(3);
    expect(results[4]).toMatchObject({ code: 'rate_limited', retryable: true });
    // Another session of the tenant has its own bucket.
    expect(admission.session('acme', 's2')).toBeUndefined();
    now += 500; // one more message's worth at 2 per second
    expect(admission.session('acme', 's1')).toBeUndefined();
    expect(admission.session('acme', 's1')).toMatchObject({ code: 'rate_limited' });
  });

  it('limits a tenant over all its sessions, and no one else', () => {
    const admission = createAdmission({ maxPromptBytes: 0, sessionRate: { perSecond: 0, burst: 0 }, tenantRate: { perSecond: 10, burst: 10 } }, () => 0);
    for (let index = 0; index < 10; index++) expect(admission.tenant('acme')).toBeUndefined();
    expect(admission.tenant('acme')).toMatchObject({ code: 'rate_limited', message: expect.stringContaining('tenant acme') });
    expect(admission.tenant('globex')).toBeUndefined();
  });

  it('counts the attachments of a prompt, names and contents, in its size, in UTF-8 bytes', () => {
    expect(promptBytes({ text: 'héllo' })).toBe(6);
    expect(promptBytes({ text: 'Review', attachments: [{ name: 'a.ts', content: 'let x;\n' }, { name: 'é', content: '' }] })).toBe(6 + 4 + 7 + 2);
  });

  it('refuses a prompt over the size limit with payload_too_large, and none when the limit is 0', () => {
    const limited = createAdmission({ maxPromptBytes: 10, sessionRate: { perSecond: 0, burst: 0 }, tenantRate: { perSecond: 0, burst: 0 } }, () => 0);
    expect(limited.promptSize(10)).toBeUndefined();
    expect(limited.promptSize(11)).toMatchObject({ code: 'payload_too_large', retryable: false });
    const unlimited = createAdmission({ maxPromptBytes: 0, sessionRate: { perSecond: 0, burst: 0 }, tenantRate: { perSecond: 0, burst: 0 } }, () => 0);
    expect(unlimited.promptSize(1 << 20)).toBeUndefined();
  });

  it('forgets a quiet session once its bucket has refilled: it starts full again', () => {
    let now = 0;
    const admission = createAdmission({ maxPromptBytes: 0, sessionRate: { perSecond: 1, burst: 2 }, tenantRate: { perSecond: 0, burst: 0 } }, () => now);
    expect(admission.session('acme', 's1')).toBeUndefined();
    expect(admission.session('acme', 's1')).toBeUndefined();
    admission.prune();
    expect(admission.session('acme', 's1')).toMatchObject({ code: 'rate_limited' });
    now += 2_000;
    admission.prune();
    expect(admission.session('acme', 's1')).toBeUndefined();
    expect(admission.session('acme', 's1')).toBeUndefined();
  });

  it('keeps its buckets bounded under a flood of new session ids', () => {
    let now = 0;
    const admission = createAdmission({ maxPromptBytes: 0, sessionRate: { perSecond: 1, burst: 1 }, tenantRate: { perSecond: 0, burst: 0 } }, () => now);
    for (let index = 0; index < 120_000; index++) {
      now += 1;
      expect(admission.session('acme', `s${index}`)).toBeUndefined();
    }
    // A session seen a moment ago still has its empty bucket.
    expect(admission.session('acme', 's119999')).toMatchObject({ code: 'rate_limited' });
  });
});

describe('rate limiter (shared by the runtime and memory)', () => {
  it('keeps a bucket per key at one rate, and drops the refilled ones on prune', () => {
    let now = 0;
    const limiter = createRateLimiter({ perSecond: 1, burst: 2 }, () => now);
    expect([limiter.take('a'), limiter.take('a'), limiter.take('a'), limiter.take('b')]).toEqual([true, true, false, true]);
    expect(limiter.size()).toBe(2);
    now += 2_000;
    limiter.prune();
    expect(limiter.size()).toBe(0);
  });

  it('reads <per second>[:<burst>], and names the variable of a bad one', () => {
    expect(parseRate('X', '50')).toEqual({ perSecond: 50, burst: 100 });
    expect(parseRate('X', '0.5:3')).toEqual({ perSecond: 0.5, burst: 3 });
    expect(parseRate('X', '0')).toEqual({ perSecond: 0, burst: 1 });
    expect(() => parseRate('AGENTBUS_MEMORY_TENANT_RATE', 'fast')).toThrow(/AGENTBUS_MEMORY_TENANT_RATE must be/);
    expect(() => parseRate('X', '5:0')).toThrow(/the burst must be at least 1/);
  });
});

describe('refusal log', () => {
  it('writes the first refusal of an interval at once and the rest as one counted line with a sample', async () => {
    const logs = captureLogs();
    const refusals = createRefusalLog({ logger: logs.logger, intervalMs: 50 });
    for (let index = 0; index < 10_000; index++) refusals.refused({ code: index % 2 ? 'invalid_input' : 'rate_limited', message: `bad ${index}`, sessionId: 's' });
    expect(logs.lines).toHaveLength(1);
    await new Promise((resolve) => setTimeout(resolve, 80));
    const lines = logs.lines;
    expect(lines).toHaveLength(2);
    expect(lines[1]).toMatchObject({ refused: 9_999, byCode: { invalid_input: 5_000, rate_limited: 4_999 }, sample: { message: 'bad 1' } });
    refusals.close();
    expect(logs.lines).toHaveLength(2);
  });
});
