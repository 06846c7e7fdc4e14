import { describe, expect, it } from 'vitest';
import { CancelledError } from '../../src/errors.ts';
import type { AfterHookReply, AfterHookRequest, BeforeHookReply, BeforeHookRequest, HookReply } from '../../src/protocol/index.ts';
import { createScrubber } from '../../src/scrub/index.ts';
import { DEFAULT_RUNTIME_CONFIG } from '../../services/runtime/config.ts';
import type { ToolHookConfig } from '../../services/runtime/config.ts';
import type { ToolHookPort } from '../../services/runtime/ports.ts';
import { runAfterHooks, runBeforeHooks } from '../../services/runtime/tools/tool-call-hooks.ts';
import { createToolHooks } from '../../services/runtime/tools/tool-hooks.ts';
import type { HookedCall } from '../../services/runtime/tools/tool-hooks.ts';
import type { ExecuteToolsInput } from '../../machines/index.ts';
import { captureLogs } from '../helpers/captured-logs.ts';

// The hook chains against a fake port that records every request: order, rewrites, blocks, failure modes, and
// the glue runTool calls (which calls reach the hooks at all).

type Answer<R> = HookReply<R> | ((request: never) => HookReply<R>);
const NOW = 1_000_000;
const call: HookedCall = { v: 1, callId: 'c1', effectId: 's:t:c1', name: 'write_file', args: { path: 'a.txt' }, tier: 'side_effecting', tenant: 'acme', sessionId: 's', turnId: 't' };
const ok = <R>(reply: R): HookReply<R> => ({ ok: true, reply });
const down = { ok: false as const, error: { code: 'no_responders', message: 'no hook process answers on agentbus.hooks.x.before', retryable: true } };

function fakePort(answers: { before?: Record<string, Answer<BeforeHookReply>>; after?: Record<string, Answer<AfterHookReply>> }) {
  const asked: Array<{ hook: string; phase: string; request: BeforeHookRequest | AfterHookRequest; timeoutMs: number }> = [];
  const answer = <R>(table: Record<string, Answer<R>> | undefined, hook: string, request: unknown): HookReply<R> => {
    const found = table?.[hook];
    if (!found) throw new Error(`no answer for ${hook}`);
    return typeof found === 'function' ? found(request as never) : found;
  };
  const port: ToolHookPort = {
    async before(hook, request, { signal, timeoutMs }) {
      signal.throwIfAborted();
      asked.push({ hook, phase: 'before', request, timeoutMs });
      return answer(answers.before, hook, request);
    },
    async after(hook, request, { signal, timeoutMs }) {
      signal.throwIfAborted();
      asked.push({ hook, phase: 'after', request, timeoutMs });
      return answer(answers.after, hook, request);
    },
  };
  return { port, asked };
}

function chain(config: Partial<ToolHookConfig>, answers: Parameters<typeof fakePort>[0]) {
  const { port, asked } = fakePort(answers);
  const { logger, lines } = captureLogs('warn');
  const hooks = createToolHooks({ port, config: { ...DEFAULT_RUNTIME_CONFIG.toolHooks, ...config }, logger, now: () => NOW });
  return { hooks, asked, lines };
}

const signal = new AbortController().signal;
const fit = async (output: string) => output.toUpperCase();

describe('the before-hook chain', () => {
  it('asks each hook in order with a deadline, passing rewritten arguments on to the next', async () => {
    const { hooks, asked } = chain(
      { before: ['policy', 'paths', 'audit'], timeoutMs: 700 },
      {
        before: {
          policy: ok({ v: 1, action: 'continue' }),
          paths: ok({ v: 1, action: 'continue', args: { path: 'sandbox/a.txt' } }),
          audit: ok({ v: 1, action: 'continue' }),
        },
      },
    );
    const decided = await hooks.before(call, { signal });
    expect(decided).toEqual({ args: { path: 'sandbox/a.txt' }, rewrittenBy: ['paths'] });
    expect(asked.map(({ hook }) => hook)).toEqual(['policy', 'paths', 'audit']);
    expect(asked[0]).toMatchObject({ timeoutMs: 700, request: { ...call, deadline: NOW + 700 } });
    expect(asked[2]?.request.args).toEqual({ path: 'sandbox/a.txt' });
  });

  it('stops at a block: the hook output is the result, an error (denied) unless the hook says isError: false', async () => {
    const blocking = chain({ before: ['policy', 'audit'] }, { before: { policy: ok({ v: 1, action: 'block', output: 'writes are off today' }), audit: ok({ v: 1, action: 'continue' }) } });
    expect(await blocking.hooks.before(call, { signal })).toEqual({
      args: call.args,
      rewrittenBy: [],
      blocked: { by: 'policy', output: 'writes are off today', error: { code: 'denied', message: 'blocked by tool hook policy', retryable: false } },
    });
    expect(blocking.asked.map(({ hook }) => hook)).toEqual(['policy']);
    const cached = chain({ before: ['cache'] }, { before: { cache: ok({ v: 1, action: 'block', output: 'cached answer', isError: false }) } });
    expect((await cached.hooks.before(call, { signal })).blocked).toEqual({ by: 'cache', output: 'cached answer' });
  });

  it('blocks with hook_failed when a hook fails, by default, and names the hook and the cause', async () => {
    const { hooks, asked, lines } = chain({ before: ['policy', 'audit'] }, { before: { policy: down, audit: ok({ v: 1, action: 'continue' }) } });
    const decided = await hooks.before(call, { signal });
    const message = 'tool hook policy (before) failed: no_responders: no hook process answers on agentbus.hooks.x.before';
    expect(decided.blocked).toEqual({ by: 'policy', output: `hook_failed: ${message}`, error: { code: 'hook_failed', message, retryable: true } });
    expect(asked).toHaveLength(1);
    expect(lines).toEqual([expect.objectContaining({ msg: 'tool hook failed; the call is blocked', hook: 'policy', callId: 'c1', sessionId: 's' })]);
  });

  it('skips a failed hook under onError continue, and the rest of the chain still runs', async () => {
    const { hooks, asked, lines } = chain(
      { before: ['policy', 'paths'], onError: 'continue' },
      { before: { policy: { ok: false, error: { code: 'timeout', message: 'no answer within 2000 ms', retryable: true } }, paths: ok({ v: 1, action: 'continue', args: { path: 'b' } }) } },
    );
    expect(await hooks.before(call, { signal })).toEqual({ args: { path: 'b' }, rewrittenBy: ['paths'] });
    expect(asked.map(({ hook }) => hook)).toEqual(['policy', 'paths']);
    expect(lines[0]).toMatchObject({ msg: 'tool hook failed; skipped', cause: { code: 'timeout' } });
  });

  it('rejects with the reason of an abort', async () => {
    const { hooks } = chain({ before: ['policy'] }, { before: { policy: ok({ v: 1, action: 'continue' }) } });
    const controller = new AbortController();
    controller.abort(new CancelledError('turn cancelled'));
    await expect(hooks.before(call, { signal: controller.signal })).rejects.toThrow('turn cancelled');
  });
});

describe('the after-hook chain', () => {
  const result = { output: 'name: Ada, phone: 555-0100' };

  it('passes each rewrite, fitted, on to the next hook and reports who rewrote', async () => {
    const { hooks, asked } = chain(
      { after: ['redact', 'audit', 'flag'] },
      {
        after: {
          redact: ok({ v: 1, action: 'continue', output: 'name: Ada, phone: [removed]' }),
          audit: ok({ v: 1, action: 'continue' }),
          flag: ok({ v: 1, action: 'continue', isError: true }),
        },
      },
    );
    const rewritten = await hooks.after(call, result, { signal, fit });
    expect(rewritten).toEqual({
      output: 'NAME: ADA, PHONE: [REMOVED]',
      error: { code: 'tool_failed', message: 'tool hook flag marked the result an error', retryable: false },
      rewrittenBy: ['redact', 'flag'],
    });
    expect(asked[0]?.request).toEqual({ ...call, output: result.output, isError: false, deadline: NOW + 2000 });
    expect(asked[1]?.request).toMatchObject({ output: 'NAME: ADA, PHONE: [REMOVED]', isError: false });
  });

  it('turns an error result into a success when a hook says isError: false', async () => {
    const failedResult = { output: 'tool_failed: boom', error: { code: 'tool_failed', message: 'boom', retryable: false } };
    const { hooks, asked } = chain({ after: ['soften'] }, { after: { soften: ok({ v: 1, action: 'continue', output: 'nothing found', isError: false }) } });
    expect(await hooks.after(call, failedResult, { signal, fit: async (output) => output })).toEqual({ output: 'nothing found', rewrittenBy: ['soften'] });
    expect(asked[0]?.request).toMatchObject({ isError: true, error: failedResult.error });
  });

  it('carries a rewrite of a failed result into its error message, which is logged beside the output', async () => {
    const failedResult = { output: 'tool_failed: no record for Ada, phone 555-0100', error: { code: 'tool_failed', message: 'no record for Ada, phone 555-0100', retryable: false } };
    const { hooks } = chain({ after: ['redact'] }, { after: { redact: ok({ v: 1, action: 'continue', output: 'tool_failed: no record for Ada, phone [phone]' }) } });
    const rewritten = await hooks.after(call, failedResult, { signal, fit: async (output) => output });
    expect(rewritten).toEqual({
      output: 'tool_failed: no record for Ada, phone [phone]',
      error: { code: 'tool_failed', message: 'tool_failed: no record for Ada, phone [phone]', retryable: false },
      rewrittenBy: ['redact'],
    });
    expect(JSON.stringify(rewritten)).not.toContain('555');
  });

  it('does not count an output handed back unchanged as a rewrite', async () => {
    const { hooks } = chain({ after: ['audit'] }, { after: { audit: ok({ v: 1, action: 'continue', output: result.output }) } });
    expect(await hooks.after(call, result, { signal, fit: async (output) => output })).toEqual({ ...result, rewrittenBy: [] });
  });

  it('withholds the result when a hook fails, by default; passes it on under onError continue', async () => {
    const blocking = chain({ after: ['redact'] }, { after: { redact: down } });
    const withheld = await blocking.hooks.after(call, result, { signal, fit });
    // The failure's text is fitted (scrubbed and cut) like any output; this test's fit upper-cases it.
    expect(withheld.error).toMatchObject({ code: 'hook_failed', message: expect.stringContaining('TOOL HOOK REDACT (AFTER) FAILED: NO_RESPONDERS') });
    expect(withheld.output).toBe(`hook_failed: ${withheld.error!.message}`);
    expect(withheld.output).not.toContain('555');
    const lenient = chain({ after: ['redact'], onError: 'continue' }, { after: { redact: down } });
    expect(await lenient.hooks.after(call, result, { signal, fit })).toEqual({ ...result, rewrittenBy: [] });
  });
});

describe('the hooks of runTool', () => {
  const input: ExecuteToolsInput = { turnId: 't', step: 1, maxSteps: 8, model: 'scripted:default', calls: [], decisions: { denied: { approved: false } } };
  const byName = new Map([['write_file', { name: 'write_file' }]]) as unknown as Parameters<typeof runBeforeHooks>[1]['byName'];
  const planned = { id: 'c1', name: 'write_file', args: { path: 'a.txt' }, tier: 'side_effecting' as const };
  const services = (hooks?: ReturnType<typeof chain>['hooks']) => ({
    tenant: 'acme',
    sessionId: 's',
    scrubber: createScrubber(),
    config: { ...DEFAULT_RUNTIME_CONFIG, nodeId: 'n', maxToolOutputChars: 12 },
    ...(hooks ? { hooks } : {}),
  });

  it('asks nothing without hooks, for a denied call, or for a tool nobody serves', async () => {
    const { hooks, asked } = chain({ before: ['policy'], after: ['redact'] }, { before: { policy: ok({ v: 1, action: 'block', output: 'no' }) } });
    expect(await runBeforeHooks(services(), { input, call: planned, effectId: 'e', byName }, signal)).toEqual({ args: planned.args, logged: {} });
    await runBeforeHooks(services(hooks), { input, call: { ...planned, id: 'denied' }, effectId: 'e', byName }, signal);
    await runBeforeHooks(services(hooks), { input, call: { ...planned, name: 'missing' }, effectId: 'e', byName }, signal);
    expect(asked).toEqual([]);
  });

  it('sends a resumed call that went out before its node died as it went out, asking no before-hook again; after-hooks still see its result', async () => {
    const { hooks, asked } = chain(
      { before: ['policy'], after: ['audit'] },
      { before: { policy: ok({ v: 1, action: 'block', output: 'quota used up' }) }, after: { audit: ok({ v: 1, action: 'continue' }) } },
    );
    const resumed = { ...planned, resumed: true, sent: { args: { path: 'sandbox/a.txt' }, argsRewrittenBy: ['paths'] } };
    const hooked = await runBeforeHooks(services(hooks), { input, call: resumed, effectId: 'e', byName }, signal);
    expect(hooked).toEqual({ args: { path: 'sandbox/a.txt' }, logged: { argsRewrittenBy: ['paths'] }, after: expect.objectContaining({ args: { path: 'sandbox/a.txt' } }) });
    await runAfterHooks(services(hooks), hooked, { output: 'written' }, signal);
    expect(asked.map(({ hook, phase }) => `${phase} ${hook}`)).toEqual(['after audit']);
    // Without hooks configured now, it still goes out with the arguments it went out with.
    expect(await runBeforeHooks(services(), { input, call: resumed, effectId: 'e', byName }, signal)).toEqual({ args: { path: 'sandbox/a.txt' }, logged: { argsRewrittenBy: ['paths'] } });
  });

  it('gives the after-hooks the call as sent, scrubs and cuts a rewritten output, and logs who blocked or rewrote', async () => {
    const { hooks, asked } = chain(
      { before: ['paths'], after: ['redact'] },
      { before: { paths: ok({ v: 1, action: 'continue', args: { path: 'b.txt' } }) }, after: { redact: ok({ v: 1, action: 'continue', output: 'password=hunter2hunter2 and more' }) } },
    );
    const hooked = await runBeforeHooks(services(hooks), { input, call: planned, effectId: 'e', byName }, signal);
    expect(hooked).toMatchObject({ args: { path: 'b.txt' }, logged: { argsRewrittenBy: ['paths'] }, after: { args: { path: 'b.txt' }, effectId: 'e' } });
    const after = await runAfterHooks(services(hooks), hooked, { output: 'written' }, signal);
    expect(after).toEqual({ output: 'password=[RE\n[output truncated at 12 characters]', logged: { outputRewrittenBy: ['redact'] } });
    expect(asked.map(({ phase }) => phase)).toEqual(['before', 'after']);

    const blocking = chain({ before: ['policy'], after: ['redact'] }, { before: { policy: ok({ v: 1, action: 'block', output: 'no' }) } });
    const blocked = await runBeforeHooks(services(blocking.hooks), { input, call: planned, effectId: 'e', byName }, signal);
    expect(await runAfterHooks(services(blocking.hooks), blocked, { output: 'no' }, signal)).toEqual({ output: 'no', logged: { blockedBy: 'policy' } });
    expect(blocking.asked.map(({ phase }) => phase)).toEqual(['before']);
  });
});
