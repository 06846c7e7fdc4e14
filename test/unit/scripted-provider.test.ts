import { mkdtemp, rm, writeFile } from 'node:fs/promises';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { InvalidInputError, ProviderError } from '../../src/errors.ts';
import type { ChunkBody } from '../../src/protocol/index.ts';
import type { AdapterRequest, ProviderAdapter } from '../../services/provider/adapter.ts';
import { createScriptedAdapter, splitText } from '../../services/provider/scripted.ts';
import type { ScriptedClock } from '../../services/provider/scripted.ts';
import { loadScript, parseScript } from '../../services/provider/script.ts';
import type { Script } from '../../services/provider/script.ts';

/** A clock that records the waits and does not wait. */
function recordingClock(): ScriptedClock & { waits: number[] } {
  const waits: number[] = [];
  return {
    waits,
    async sleep(ms, signal) {
      signal.throwIfAborted();
      waits.push(ms);
    },
  };
}

function request(text: string, scope: { tenant?: string; sessionId?: string } = {}): AdapterRequest {
  return { requestId: 'r1', model: 'default', messages: [{ role: 'user', content: text }], tools: [], ...scope };
}

async function collect(adapter: ProviderAdapter, adapterRequest: AdapterRequest, signal = new AbortController().signal): Promise<ChunkBody[]> {
  const chunks: ChunkBody[] = [];
  for await (const chunk of adapter.generate(adapterRequest, { signal })) chunks.push(chunk);
  return chunks;
}

function textOf(chunks: readonly ChunkBody[]): string {
  return chunks.map((chunk) => (chunk.type === 'text-delta' ? chunk.text : '')).join('');
}

describe('splitText', () => {
  it('cuts text into word-sized pieces that join back to the text', () => {
    expect(splitText('  Hello there,  world! ')).toEqual(['  ', 'Hello ', 'there,  ', 'world! ']);
  });

  it('cuts text into chunkSize characters without splitting a surrogate pair', () => {
    expect(splitText('ab😀cd', 2)).toEqual(['ab', '😀c', 'd']);
  });
});

describe('scripted adapter', () => {
  it('streams a scripted text as text-delta chunks, then usage and done', async () => {
    const clock = recordingClock();
    const adapter = createScriptedAdapter({ script: { responses: [{ text: 'one two three', delayMs: 15 }] }, clock });
    const chunks = await collect(adapter, request('hi'));
    expect(chunks.map((chunk) => chunk.type)).toEqual(['text-delta', 'text-delta', 'text-delta', 'usage', 'done']);
    expect(textOf(chunks)).toBe('one two three');
    expect(clock.waits).toEqual([15, 15]);
    expect(chunks.at(-1)).toMatchObject({ type: 'done', finishReason: 'stop', model: 'default' });
  });

  it('hands out tool calls with ids unique in the session and finishes with tool_calls', async () => {
    const script: Script = { responses: [{ toolCalls: [{ name: 'list_dir', args: { path: '.' } }, { name: 'read_file', args: { path: 'README.md' } }] }] };
    const adapter = createScriptedAdapter({ script, clock: recordingClock() });
    const chunks = await collect(adapter, request('hi', { sessionId: 's1' }));
    const calls = chunks.filter((chunk) => chunk.type === 'tool-call');
    expect(calls.map((call) => [call.name, call.args])).toEqual([['list_dir', { path: '.' }], ['read_file', { path: 'README.md' }]]);
    expect(new Set(calls.map((call) => call.toolCallId)).size).toBe(2);
    expect(calls.every((call) => call.toolCallId.startsWith('call_'))).toBe(true);
    expect(chunks.at(-1)).toMatchObject({ type: 'done', finishReason: 'tool_calls' });
  });

  it('advances the cursor per session and keeps sessions apart', async () => {
    const adapter = createScriptedAdapter({ script: { responses: [{ text: 'first' }, { text: 'second' }] }, clock: recordingClock() });
    expect(textOf(await collect(adapter, request('x', { tenant: 't', sessionId: 'a' })))).toBe('first');
    expect(textOf(await collect(adapter, request('x', { tenant: 't', sessionId: 'a' })))).toBe('second');
    expect(textOf(await collect(adapter, request('x', { tenant: 't', sessionId: 'b' })))).toBe('first');
    expect(textOf(await collect(adapter, request('x', { tenant: 'other', sessionId: 'a' })))).toBe('first');
  });

  it('echoes the last user message once the script runs out', async () => {
    const adapter = createScriptedAdapter({ script: { responses: [{ text: 'scripted' }] }, clock: recordingClock() });
    await collect(adapter, request('ignored'));
    const messages: AdapterRequest['messages'] = [
      { role: 'user', content: 'first question' },
      { role: 'assistant', content: 'answer' },
      { role: 'user', content: 'say this back' },
    ];
    const chunks = await collect(adapter, { ...request(''), messages });
    expect(textOf(chunks)).toBe('say this back');
    expect(chunks.some((chunk) => chunk.type === 'tool-call')).toBe(false);
  });

  it('echoes from the first call when no script is configured', async () => {
    expect(textOf(await collect(createScriptedAdapter(), request('echo me')))).toBe('echo me');
  });

  it('reports scripted usage, or about one token per four characters', async () => {
    const adapter = createScriptedAdapter({
      script: { responses: [{ text: 'x', usage: { inputTokens: 7, outputTokens: 3 } }, { text: '12345678' }] },
      clock: recordingClock(),
    });
    expect((await collect(adapter, request('hi'))).find((chunk) => chunk.type === 'usage')).toMatchObject({ usage: { inputTokens: 7, outputTokens: 3 } });
    expect((await collect(adapter, request('abcdefghi'))).find((chunk) => chunk.type === 'usage')).toMatchObject({
      usage: { inputTokens: 3, outputTokens: 2 },
    });
  });

  it('throws a ProviderError with the code of a scripted error entry, after its text', async () => {
    const adapter = createScriptedAdapter({
      script: { responses: [{ text: 'partial', error: { code: 'rate_limited', message: 'slow down', retryable: true } }] },
      clock: recordingClock(),
    });
    const seen: ChunkBody[] = [];
    const run = async () => {
      for await (const chunk of adapter.generate(request('hi'), { signal: new AbortController().signal })) seen.push(chunk);
    };
    const error = await run().then(
      () => undefined,
      (caught: unknown) => caught,
    );
    expect(error).toBeInstanceOf(ProviderError);
    expect(error).toMatchObject({ code: 'rate_limited', message: 'slow down', retryable: true });
    expect(textOf(seen)).toBe('partial');
  });

  it('stops waiting between chunks as soon as its signal aborts', async () => {
    const adapter = createScriptedAdapter({ script: { responses: [{ text: 'a b c', delayMs: 60_000 }] } });
    const controller = new AbortController();
    const started = Date.now();
    const seen: ChunkBody[] = [];
    const run = async () => {
      for await (const chunk of adapter.generate(request('hi'), { signal: controller.signal })) {
        seen.push(chunk);
        setTimeout(() => controller.abort(new Error('stop now')), 20);
      }
    };
    await expect(run()).rejects.toThrow('stop now');
    expect(seen).toHaveLength(1);
    expect(Date.now() - started).toBeLessThan(1000);
  });

  it('does not start when its signal is already aborted', async () => {
    const adapter = createScriptedAdapter({ script: { responses: [{ text: 'never' }] } });
    const controller = new AbortController();
    controller.abort(new Error('too late'));
    await expect(collect(adapter, request('hi'), controller.signal)).rejects.toThrow('too late');
  });

  it('forgets the least recently used session past maxSessions', async () => {
    const adapter = createScriptedAdapter({ script: { responses: [{ text: 'first' }, { text: 'second' }] }, clock: recordingClock(), maxSessions: 2 });
    await collect(adapter, request('x', { sessionId: 'a' }));
    await collect(adapter, request('x', { sessionId: 'b' }));
    await collect(adapter, request('x', { sessionId: 'c' }));
    expect(textOf(await collect(adapter, request('x', { sessionId: 'a' })))).toBe('first');
  });
});

describe('script files', () => {
  let dir: string;
  beforeAll(async () => {
    dir = await mkdtemp(join(tmpdir(), 'agentbus-script-'));
  });
  afterAll(async () => {
    await rm(dir, { recursive: true, force: true });
  });

  it('names the bad entry of an invalid script', () => {
    expect(() => parseScript({ responses: [{ text: 'ok' }, { toolCalls: [{ name: 42 }] }] }, 'demo.json')).toThrow(
      /invalid script demo\.json: responses\[1\]\.toolCalls\[0\]\.name/,
    );
    expect(() => parseScript({ responses: [{ text: 'ok', chunkSize: 0 }] })).toThrow(/responses\[0\]\.chunkSize/);
    expect(() => parseScript({ responses: [{}] })).toThrow(/responses\[0\]: a response needs text, toolCalls or error/);
    expect(() => parseScript({ responses: [{ txt: 'typo' }] })).toThrow(InvalidInputError);
  });

  it('loads a JSON script file and says which file is broken', async () => {
    const good = join(dir, 'good.json');
    await writeFile(good, JSON.stringify({ responses: [{ text: 'hi', toolCalls: [{ name: 'list_dir', args: { path: '.' } }] }] }));
    expect((await loadScript(good)).responses[0]?.toolCalls?.[0]?.name).toBe('list_dir');
    const broken = join(dir, 'broken.json');
    await writeFile(broken, '{ "responses": [ ');
    await expect(loadScript(broken)).rejects.toThrow(/broken\.json is not valid JSON/);
    await expect(loadScript(join(dir, 'missing.json'))).rejects.toThrow(/cannot read script .*missing\.json/);
  });

  it('ships a demo script that lists the folder, reads the README, then answers', async () => {
    const script = await loadScript(new URL('../../examples/demo-script.json', import.meta.url).pathname);
    expect(script.responses.map((response) => response.toolCalls?.map((call) => call.name) ?? [])).toEqual([['list_dir'], ['read_file'], []]);
    expect(script.responses[2]?.text).toBeTruthy();
  });
});
