import { describe, expect, it } from 'vitest';
import { pino } from 'pino';
import { ErrorCode } from '../../src/protocol/index.ts';
import type { ToolCallReply, ToolCallRequest } from '../../src/protocol/index.ts';
import type { PlannedToolRequest } from '../../services/runtime/tools/tool-call-attempts.ts';
import { createScrubber } from '../../src/scrub/index.ts';
import type { ToolCallOptions } from '../../src/bus/tool-client.ts';
import { callToolWithRecovery } from '../../services/runtime/tools/tool-call-attempts.ts';
import type { ToolInfo } from '../../services/runtime/ports.ts';
import type { SessionServices } from '../../services/runtime/turn/session-services.ts';

// How the runtime recovers a call whose worker fell silent or was unavailable, against a fake tool port that
// records every attempt.

type Answer = (request: ToolCallRequest, attempt: number) => ToolCallReply;

function harness(answers: Answer[], waitForServiceMs = 1_000) {
  const attempts: Array<{ callId: string; effectId: string; attempt: number }> = [];
  const sent: ToolCallRequest[] = [];
  const deadlines: number[] = [];
  const published: Array<{ type: string; data: unknown }> = [];
  const services = {
    tenant: 'acme',
    sessionId: 's1',
    config: { waitForServiceMs },
    newId: () => `n${attempts.length}`,
    now: () => 1_000_000 + attempts.length * 10_000,
    logger: pino({ level: 'silent' }),
    scrubber: createScrubber(),
    live: { publish: (type: string, _scope: unknown, data: unknown) => published.push({ type, data }) },
    tools: {
      listTools: async () => [],
      call: async (request: ToolCallRequest, options: ToolCallOptions) => {
        const attempt = options.attempt ?? 1;
        attempts.push({ callId: request.callId, effectId: request.effectId, attempt });
        sent.push(request);
        deadlines.push(request.deadline);
        const answer = answers[Math.min(attempts.length - 1, answers.length - 1)]!;
        return answer(request, attempt);
      },
    },
  } as unknown as SessionServices;
  return { services, attempts, sent, published, deadlines };
}

const request: PlannedToolRequest = { v: 1, effectId: 's1:t1:call_1', name: 'lookup', args: {}, tenant: 'acme', sessionId: 's1', turnId: 't1', deadline: Date.now() + 60_000 };
const scope = { turnId: 't1', step: 1, toolCallId: 'call_1' };
const tool = (over: Partial<ToolInfo>): ToolInfo => ({ name: 'lookup', description: '', parameters: {}, tier: 'read_only', timeoutMs: 5_000, idempotent: false, ...over });
const lost: Answer = (call) => ({ v: 1, callId: call.callId, ok: false, error: { code: ErrorCode.workerLost, message: 'no heartbeat for 3000 ms', retryable: true } });
const unavailable: Answer = (call) => ({ v: 1, callId: call.callId, ok: false, error: { code: ErrorCode.unavailable, message: 'the MCP server is down', retryable: true } });
const nobody: Answer = (call) => ({ v: 1, callId: call.callId, ok: false, error: { code: ErrorCode.noResponders, message: 'no worker of tool lookup is listening now', retryable: true } });
const fine: Answer = (call, attempt) => ({ v: 1, callId: call.callId, ok: true, output: `answered at attempt ${attempt}` });
const options = () => ({ signal: new AbortController().signal, timeoutMs: 5_000 });

describe('the id of each attempt', () => {
  it('is minted by the runtime for every send, the first included, and the model id travels beside it as toolCallId', async () => {
    const { services, sent } = harness([lost, fine]);
    const reply = await callToolWithRecovery(services, request, tool({}), scope, options());
    expect(reply).toEqual({ v: 1, callId: 'n1', ok: true, output: 'answered at attempt 2' });
    expect(sent.map((call) => [call.callId, call.toolCallId, call.effectId])).toEqual([
      ['n0', 'call_1', 's1:t1:call_1'],
      ['n1', 'call_1', 's1:t1:call_1'],
    ]);
  });

  it('never is the model id, even when two sessions reuse one (call_0)', async () => {
    const one = harness([fine]);
    const other = harness([fine]);
    // Each runtime's id generator is its own; what matters is that the model's id is not what the worker sees.
    let counter = 0;
    const services = [one.services, other.services].map((services) => ({ ...services, newId: () => `nuid-${(counter += 1)}` }) as SessionServices);
    await callToolWithRecovery(services[0]!, request, tool({}), { ...scope, toolCallId: 'call_0' }, options());
    await callToolWithRecovery(services[1]!, { ...request, sessionId: 's2' }, tool({}), { ...scope, toolCallId: 'call_0' }, options());
    expect([...one.sent, ...other.sent].map((call) => call.callId)).toEqual(['nuid-1', 'nuid-2']);
  });
});

describe('a call whose worker was lost', () => {
  it('is made again for a read-only tool, as a repeat with a call id of its own (unique to the attempt) and the same effectId', async () => {
    const { services, attempts } = harness([lost, fine]);
    const reply = await callToolWithRecovery(services, request, tool({}), scope, options());
    expect(reply).toMatchObject({ ok: true, output: 'answered at attempt 2' });
    expect(attempts).toEqual([
      { callId: 'n0', effectId: 's1:t1:call_1', attempt: 1 },
      { callId: 'n1', effectId: 's1:t1:call_1', attempt: 2 },
    ]);
  });

  it('gives each try the whole timeout: a retry after a late loss gets a deadline of its own', async () => {
    const { services, deadlines } = harness([lost, lost, fine]);
    await callToolWithRecovery(services, request, tool({}), scope, options());
    // The first keeps the deadline runTool set; each retry's is its own send time (the fake clock) + 5 s.
    expect(deadlines).toEqual([request.deadline, 1_010_000 + 5_000, 1_020_000 + 5_000]);
  });

  it('ends interrupted, without a second call, for a side-effecting tool that is not idempotent and keeps no ledger', async () => {
    const { services, attempts } = harness([lost, fine]);
    const reply = await callToolWithRecovery(services, request, tool({ tier: 'side_effecting' }), scope, options());
    expect(reply).toMatchObject({ ok: false, error: { code: 'interrupted', retryable: false } });
    expect(attempts).toHaveLength(1);
  });

  it('is made again as a repeat when the workers keep a ledger: the worker answers it from the record', async () => {
    const { services, attempts } = harness([lost, fine]);
    const reply = await callToolWithRecovery(services, request, tool({ tier: 'privileged', ledger: true }), scope, options());
    expect(reply).toMatchObject({ ok: true });
    expect(attempts.map((attempt) => attempt.attempt)).toEqual([1, 2]);
  });

  it('gives up after three attempts in all, with the last worker_lost', async () => {
    const { services, attempts } = harness([lost]);
    const reply = await callToolWithRecovery(services, request, tool({ idempotent: true, tier: 'side_effecting' }), scope, options());
    expect(reply).toMatchObject({ ok: false, error: { code: 'worker_lost' } });
    expect(attempts.map((attempt) => attempt.attempt)).toEqual([1, 2, 3]);
  });

  it('counts a resumed call as a repeat from its first attempt', async () => {
    const { services, attempts } = harness([fine]);
    await callToolWithRecovery(services, request, tool({ tier: 'side_effecting', ledger: true }), { ...scope, firstAttempt: 2 }, options());
    expect(attempts).toEqual([{ callId: 'n0', effectId: 's1:t1:call_1', attempt: 2 }]);
  });
});

describe('a call no worker took (no_responders: none listening, or a stopping one passed it on; it never ran)', () => {
  it('goes out again after a short wait, whatever its tier, as the same attempt (not a repeat the ledger would refuse), under a new id', async () => {
    const { services, attempts, published } = harness([nobody, fine]);
    const reply = await callToolWithRecovery(services, request, tool({ tier: 'side_effecting', ledger: true }), scope, options());
    expect(reply).toEqual({ v: 1, callId: 'n1', ok: true, output: 'answered at attempt 1' });
    expect(attempts).toEqual([
      { callId: 'n0', effectId: 's1:t1:call_1', attempt: 1 },
      { callId: 'n1', effectId: 's1:t1:call_1', attempt: 1 },
    ]);
    // 1 s of waiting is 100, 200, 400 and 300 ms: five tries in all.
    expect(published).toEqual([
      {
        type: 'retry',
        data: { attempt: 2, maxAttempts: 5, delayMs: 100, error: { code: 'no_responders', message: 'no worker of tool lookup is listening now', retryable: true }, tool: 'lookup', toolCallId: 'call_1' },
      },
    ]);
  });

  it('is waited for with backoff for waitForServiceMs, then fails no_responders saying how long it waited', async () => {
    const { services, attempts, published } = harness([nobody], 700);
    const started = Date.now();
    const reply = await callToolWithRecovery(services, request, tool({}), scope, options());
    expect(Date.now() - started).toBeGreaterThanOrEqual(650);
    expect(reply).toMatchObject({
      ok: false,
      error: { code: 'no_responders', retryable: false, message: 'no worker of tool lookup is listening now; waited 700 ms for one to start (AGENTBUS_WAIT_FOR_SERVICE_MS)' },
    });
    // 100 + 200 + 400 = 700: three waits, four sends.
    expect(attempts).toHaveLength(4);
    expect(published.map(({ data }) => data)).toMatchObject([
      { attempt: 2, maxAttempts: 4, delayMs: 100 },
      { attempt: 3, maxAttempts: 4, delayMs: 200 },
      { attempt: 4, maxAttempts: 4, delayMs: 400 },
    ]);
    expect(new Set(attempts.map((attempt) => attempt.callId)).size).toBe(4);
  });

  it('stops waiting at once when the turn is cancelled', async () => {
    const { services, attempts } = harness([nobody], 30_000);
    const controller = new AbortController();
    const started = Date.now();
    const pending = callToolWithRecovery(services, request, tool({}), scope, { signal: controller.signal, timeoutMs: 5_000 });
    setTimeout(() => controller.abort(new Error('cancelled by the user')), 450);
    await expect(pending).rejects.toThrow('cancelled by the user');
    expect(Date.now() - started).toBeLessThan(1_500);
    // 100, 200 and part of the 400 ms wait: three sends, no fourth after the cancel.
    expect(attempts).toHaveLength(3);
  });

  it('goes out again, after a moment, when a worker had too many calls waiting (busy)', async () => {
    const busy: Answer = (call) => ({ v: 1, callId: call.callId, ok: false, error: { code: ErrorCode.busy, message: 'the tool worker has 1024 calls waiting', retryable: true } });
    const { services, attempts } = harness([busy, fine]);
    const started = Date.now();
    const reply = await callToolWithRecovery(services, request, tool({ tier: 'side_effecting' }), scope, options());
    expect(reply).toMatchObject({ ok: true, output: 'answered at attempt 1' });
    expect(attempts.map((attempt) => attempt.attempt)).toEqual([1, 1]);
    expect(Date.now() - started).toBeGreaterThanOrEqual(150);
  });

  it('gives up on busy workers after three tries in all', async () => {
    const busy: Answer = (call) => ({ v: 1, callId: call.callId, ok: false, error: { code: ErrorCode.busy, message: 'busy', retryable: true } });
    const { services, attempts } = harness([busy]);
    const reply = await callToolWithRecovery(services, request, tool({ tier: 'privileged' }), scope, options());
    expect(reply).toMatchObject({ ok: false, error: { code: 'busy' } });
    expect(attempts).toHaveLength(3);
  });
});

describe('a call answered unavailable', () => {
  it('is asked again after a short wait for a read-only tool', async () => {
    const { services, attempts } = harness([unavailable, fine]);
    const started = Date.now();
    const reply = await callToolWithRecovery(services, request, tool({}), scope, options());
    expect(reply).toMatchObject({ ok: true, output: 'answered at attempt 2' });
    expect(Date.now() - started).toBeGreaterThanOrEqual(450);
    expect(attempts).toHaveLength(2);
  });

  it('is handed to the model as it is for a tool that is not safe to run twice', async () => {
    const { services, attempts } = harness([unavailable, fine]);
    const reply = await callToolWithRecovery(services, request, tool({ tier: 'side_effecting', ledger: true }), scope, options());
    expect(reply).toMatchObject({ ok: false, error: { code: 'unavailable' } });
    expect(attempts).toHaveLength(1);
  });

  it('stops waiting when the turn is cancelled', async () => {
    const { services, attempts } = harness([unavailable, fine]);
    const controller = new AbortController();
    const pending = callToolWithRecovery(services, request, tool({}), scope, { signal: controller.signal, timeoutMs: 5_000 });
    setTimeout(() => controller.abort(new Error('cancelled by the user')), 50);
    await expect(pending).rejects.toThrow('cancelled by the user');
    expect(attempts).toHaveLength(1);
  });
});
