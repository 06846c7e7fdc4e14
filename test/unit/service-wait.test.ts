import { describe, expect, it } from 'vitest';
import { AgentbusError, ErrorCode, NoRespondersError, ProviderError } from '../../src/errors.ts';
import { serviceWaitSchedule, waitForService } from '../../services/runtime/models/service-wait.ts';
import type { ServiceWaitReport } from '../../services/runtime/models/service-wait.ts';

const absent = () => new ProviderError(ErrorCode.noResponders, 'no provider service serves "scripted"', { retryable: true, provider: 'scripted' });

describe('waiting for a service', () => {
  it('spends at most the wait, in growing delays, the last one cut to fit', () => {
    expect(serviceWaitSchedule(0)).toEqual([]);
    expect(serviceWaitSchedule(1500)).toEqual([250, 500, 750]);
    expect(serviceWaitSchedule(6000)).toEqual([250, 500, 1000, 2000, 2000, 250]);
    expect(serviceWaitSchedule(30_000).reduce((sum, delay) => sum + delay, 0)).toBe(30_000);
  });

  it('calls again after each wait until the service answers, reporting every wait', async () => {
    let calls = 0;
    const reports: ServiceWaitReport[] = [];
    const value = await waitForService({
      waitMs: 1000,
      delaysMs: [10, 20],
      signal: new AbortController().signal,
      onWait: (report) => reports.push(report),
      call: async () => {
        calls += 1;
        if (calls < 3) throw absent();
        return 'served';
      },
    });
    expect(value).toBe('served');
    expect(reports.map(({ attempt, delayMs, error }) => ({ attempt, delayMs, code: error.code }))).toEqual([
      { attempt: 2, delayMs: 10, code: 'no_responders' },
      { attempt: 3, delayMs: 20, code: 'no_responders' },
    ]);
  });

  it('gives up after the wait with the service error, no longer retryable, saying how long it waited', async () => {
    const error = await waitForService({ waitMs: 60, delaysMs: [20], signal: new AbortController().signal, call: () => Promise.reject(absent()) }).catch((caught: unknown) => caught);
    expect(error).toBeInstanceOf(ProviderError);
    expect(error).toMatchObject({ code: 'no_responders', retryable: false, provider: 'scripted' });
    expect((error as Error).message).toMatch(/serves "scripted".*waited 60 ms/);
    // A wait that has given up is not waited for again by an outer one.
    let outerCalls = 0;
    await waitForService({ waitMs: 1000, delaysMs: [5], signal: new AbortController().signal, call: () => (outerCalls++, Promise.reject(error)) }).catch(() => undefined);
    expect(outerCalls).toBe(1);
  });

  it('throws any other error at once', async () => {
    let calls = 0;
    const failure = new AgentbusError('circuit_open', 'open', { retryable: false });
    await expect(waitForService({ waitMs: 1000, signal: new AbortController().signal, call: () => (calls++, Promise.reject(failure)) })).rejects.toBe(failure);
    expect(calls).toBe(1);
  });

  it('rejects with the signal reason at once when aborted mid-wait, and calls nothing when aborted before', async () => {
    const controller = new AbortController();
    const reason = new AgentbusError(ErrorCode.cancelled, 'turn cancelled');
    const began = Date.now();
    const waiting = waitForService({ waitMs: 30_000, signal: controller.signal, onWait: () => setTimeout(() => controller.abort(reason), 20), call: () => Promise.reject(new NoRespondersError('x.generate')) });
    await expect(waiting).rejects.toBe(reason);
    expect(Date.now() - began).toBeLessThan(200);
    let calls = 0;
    await expect(waitForService({ waitMs: 1000, signal: controller.signal, call: async () => (calls++, 'never') })).rejects.toBe(reason);
    expect(calls).toBe(0);
  });
});
