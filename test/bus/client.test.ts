import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { createAgentbusClient } from '../../src/client/index.ts';
import type { AgentbusClient, SkippedMessage, StreamedEvent } from '../../src/client/index.ts';
import { InvalidInputError } from '../../src/errors.ts';
import { createCodec, createSubjects } from '../../src/protocol/index.ts';
import type { AgentEvent } from '../../src/protocol/index.ts';
import { startStack } from '../helpers/stack.ts';
import type { TestStack } from '../helpers/stack.ts';

let stack: TestStack;
let client: AgentbusClient;
const codec = createCodec();
const subjects = createSubjects();

/** msgpack that breaks off inside a map: the header says msgpack, the body cannot be read. */
const MALFORMED = new Uint8Array([0x82, 0xa1, 0x76]);

/**
 * Publishes junk on a session's live subjects as anyone could on an unsecured server, copying the envelope
 * of a real event of the turn: malformed bytes, a delta whose data is a number, a `turn.ended` on a live
 * subject, and a delta of another session.
 */
function publishLiveJunk(real: AgentEvent) {
  const { tenant, sessionId } = real;
  const envelope = { v: 1, id: 'junk', tenant, sessionId, turnId: real.turnId, ts: Date.now() };
  const delta = subjects.live(tenant, sessionId, 'assistant.delta');
  stack.client.publish(delta, MALFORMED);
  stack.client.publish(delta, codec.encode({ ...envelope, type: 'assistant.delta', data: 5 }));
  stack.client.publish(
    subjects.live(tenant, sessionId, 'turn.ended'),
    codec.encode({ ...envelope, type: 'turn.ended', data: { reason: 'failed', usage: { inputTokens: 0, outputTokens: 0 }, cost: 0, steps: 1 } }),
  );
  stack.client.publish(delta, codec.encode({ ...envelope, type: 'assistant.delta', sessionId: 'someone-else', data: { text: 'JUNK' } }));
}

const LIVE_JUNK_REASONS = [
  expect.stringContaining('malformed msgpack'),
  'invalid live event: data: Invalid input: expected object, received number',
  expect.stringContaining('invalid live event: type: Invalid discriminator value'),
  expect.stringMatching(/^invalid live event: an event of sdk\/someone-else on a subject of sdk\//),
];

const turnStates = (events: StreamedEvent[]) => events.flatMap(({ event }) => (event.type === 'state' && event.data.machine === 'turn' ? [event.data.value] : []));
const deltaText = (events: StreamedEvent[]) => events.flatMap(({ event }) => (event.type === 'assistant.delta' ? [event.data.text] : [])).join('');

beforeAll(async () => {
  stack = await startStack({
    script: {
      responses: [
        { text: 'Reading.', toolCalls: [{ name: 'read_file', args: { path: 'README.md' } }] },
        // Paced, so junk published at the step's tool.use is on the bus well before the turn ends.
        { text: 'It says hello.', chunkSize: 3, delayMs: 5 },
      ],
    },
  });
  client = createAgentbusClient({ nc: stack.client });
});

afterAll(() => stack?.stop());

describe('the client SDK', () => {
  it('asks and follows the turn to its end', async () => {
    const seen: StreamedEvent[] = [];
    const ended = await client.ask({ tenant: 'sdk', sessionId: 'ask-1' }, { text: 'read the README' }, { onEvent: (event) => seen.push(event) });
    expect(ended).toMatchObject({ reason: 'yielded', text: 'It says hello.' });
    const deltas = seen.flatMap(({ event }) => (event.type === 'assistant.delta' ? [event.data.text] : []));
    // The last deltas come from the live stream, which is not ordered with the log: ask waits for them.
    expect(deltas.join('')).toBe('Reading.It says hello.');
    expect(seen.at(-1)?.event.type).toBe('turn.ended');
    expect(seen.map(({ event }) => event.type)).toEqual(expect.arrayContaining(['user.message', 'tool.use', 'tool.result', 'turn.ended']));
    const logSeqs = seen.filter((event) => event.stream === 'log').map((event) => event.streamSeq);
    expect(logSeqs).toEqual([...logSeqs].sort((a, b) => a - b));
  });

  it('sends an ask\'s trace context as the traceparent and tracestate headers of its prompt', async () => {
    const heard: Array<{ traceparent: string; tracestate: string; contentType: string }> = [];
    const spy = stack.client.subscribe(subjects.session('sdk', 'traced', 'prompt'), {
      callback: (_error, message) => {
        heard.push({ traceparent: message.headers?.get('traceparent') ?? '', tracestate: message.headers?.get('tracestate') ?? '', contentType: message.headers?.get('Content-Type') ?? '' });
      },
    });
    await stack.client.flush();
    const traceparent = '00-a1b2c3d4e5f60718293a4b5c6d7e8f90-0123456789abcdef-01';
    const ended = await client.ask({ tenant: 'sdk', sessionId: 'traced' }, { text: 'hello' }, { trace: { traceparent, tracestate: 'vendor=1' } });
    spy.unsubscribe();
    expect(ended.reason).toBe('yielded');
    expect(heard).toEqual([{ traceparent, tracestate: 'vendor=1', contentType: 'application/msgpack' }]);
  });

  it('resumes a watch after the last sequences it saw, missing nothing', async () => {
    const target = { tenant: 'sdk', sessionId: 'resume-1' };
    const all: StreamedEvent[] = [];
    await client.ask(target, { text: 'first' }, { onEvent: (event) => all.push(event) });
    // A client that saw only the first few events comes back and resumes from there.
    const cut = 4;
    const seenBefore = all.slice(0, cut);
    const lastLog = Math.max(0, ...seenBefore.filter((event) => event.stream === 'log').map((event) => event.streamSeq));
    const lastLive = Math.max(0, ...seenBefore.filter((event) => event.stream === 'live').map((event) => event.streamSeq));
    const key = (event: StreamedEvent) => `${event.stream}:${event.streamSeq}`;
    const expected = new Set(all.slice(cut).map(key));
    const watch = await client.watch(target, { from: { log: lastLog, live: lastLive }, signal: AbortSignal.timeout(5000) });
    const replayed = new Set<string>();
    for await (const event of watch) {
      replayed.add(key(event));
      if ([...expected].every((value) => replayed.has(value))) break;
    }
    expect([...expected].filter((value) => !replayed.has(value))).toEqual([]);
    // Nothing from before the resume point comes again.
    expect(all.slice(0, cut).filter((event) => replayed.has(key(event)))).toEqual([]);
  });

  it('asks through junk published on the live subjects mid-turn: skipped, heard by onInvalid, the turn delivered whole', async () => {
    const seen: StreamedEvent[] = [];
    const skipped: SkippedMessage[] = [];
    let published = false;
    const ended = await client.ask({ tenant: 'sdk', sessionId: 'junk-ask-1' }, { text: 'read the README' }, {
      timeoutMs: 15_000,
      onEvent: (streamed) => {
        seen.push(streamed);
        if (streamed.event.type === 'tool.use' && !published) {
          published = true;
          publishLiveJunk(streamed.event);
        }
      },
      onInvalid: (message) => skipped.push(message),
    });
    expect(published).toBe(true);
    // The turn.ended published on a live subject did not end it: the runtime's own did, on the log.
    expect(ended).toMatchObject({ reason: 'yielded', text: 'It says hello.' });
    expect(seen.at(-1)?.event.type).toBe('turn.ended');
    expect(seen.filter(({ event }) => event.type === 'turn.ended')).toHaveLength(1);
    expect(deltaText(seen)).toBe('Reading.It says hello.');
    expect(turnStates(seen)).toEqual(['Preparing', 'Streaming', 'ToolExecution', 'Preparing', 'Streaming', 'Yielding']);
    const logSeqs = seen.filter((event) => event.stream === 'log').map((event) => event.streamSeq);
    expect(logSeqs).toEqual([...logSeqs].sort((a, b) => a - b));
    expect(skipped.map((message) => message.error.message)).toEqual(LIVE_JUNK_REASONS);
    expect(skipped.every((message) => message.stream === 'live' && message.error instanceof InvalidInputError)).toBe(true);
    expect(skipped.map((message) => message.subject)).toEqual([
      'agentbus.sdk.sessions.junk-ask-1.live.assistant.delta',
      'agentbus.sdk.sessions.junk-ask-1.live.assistant.delta',
      'agentbus.sdk.sessions.junk-ask-1.live.turn.ended',
      'agentbus.sdk.sessions.junk-ask-1.live.assistant.delta',
    ]);
  });

  it('watches through junk on the log and live subjects: only valid events of the session come out, in order', async () => {
    const target = { tenant: 'sdk', sessionId: 'junk-watch-1' };
    const skipped: SkippedMessage[] = [];
    const watch = await client.watch(target, { signal: AbortSignal.timeout(15_000), onInvalid: (message) => skipped.push(message) });
    // Stored in the session's log before its first prompt: the runtime skips them when it opens the session. Once a
    // session runs, a message stored on its log throws off the sequence its next append expects (only the runtime
    // may publish there, docs/protocol.md), so the log junk goes in first.
    const log = subjects.log(target.tenant, target.sessionId);
    await stack.client.request(log, MALFORMED);
    await stack.client.request(log, codec.encode({ v: 1, id: 'junk', type: 'session.created', tenant: 'sdk', sessionId: 'someone-else', ts: 1, data: { createdBy: 'me' } }));
    const { turnId } = await client.prompt(target, { text: 'read the README' });
    const seen: StreamedEvent[] = [];
    let ended = false;
    for await (const streamed of watch) {
      seen.push(streamed);
      if (streamed.event.type === 'tool.use' && seen.filter(({ event }) => event.type === 'tool.use').length === 1) publishLiveJunk(streamed.event);
      if (streamed.event.type === 'turn.ended') ended = true;
      if (ended && (await watch.drained())) break;
    }
    await watch.close();
    expect(seen.every(({ event }) => event.tenant === 'sdk' && event.sessionId === 'junk-watch-1')).toBe(true);
    expect(seen.filter(({ event }) => event.type === 'session.created')).toHaveLength(1);
    expect(seen.find(({ event }) => event.type === 'turn.ended')?.event).toMatchObject({ turnId, data: { reason: 'yielded' } });
    expect(deltaText(seen)).toBe('Reading.It says hello.');
    expect(turnStates(seen)).toEqual(['Preparing', 'Streaming', 'ToolExecution', 'Preparing', 'Streaming', 'Yielding']);
    const logSeqs = seen.filter((event) => event.stream === 'log').map((event) => event.streamSeq);
    expect(logSeqs).toEqual([...logSeqs].sort((a, b) => a - b));
    expect(seen.filter((event) => event.stream === 'log').map(({ event }) => event.seq)).toEqual(logSeqs);
    const fromLog = skipped.filter((message) => message.stream === 'log');
    expect(fromLog.map((message) => message.error.message)).toEqual([
      expect.stringContaining('malformed msgpack'),
      'invalid log event: an event of sdk/someone-else on a subject of sdk/junk-watch-1',
    ]);
    // Skipped messages keep their place in their stream: before every event of the turn.
    expect(Math.max(...fromLog.map((message) => message.streamSeq))).toBeLessThan(Math.min(...logSeqs));
    expect(skipped.filter((message) => message.stream === 'live').map((message) => message.error.message)).toEqual(LIVE_JUNK_REASONS);
  });

  it('ends a watch with the error onInvalid throws', async () => {
    const target = { tenant: 'sdk', sessionId: 'junk-watch-2' };
    const watch = await client.watch(target, {
      signal: AbortSignal.timeout(5000),
      onInvalid: () => {
        throw new Error('heard it');
      },
    });
    stack.client.publish(subjects.live(target.tenant, target.sessionId, 'progress'), MALFORMED);
    await expect((async () => {
      for await (const _ of watch) void _;
    })()).rejects.toThrow('heard it');
  });

  it('throws the runtime refusal as a typed error', async () => {
    await expect(client.prompt({ tenant: 'sdk', sessionId: 'bad-1' }, { text: '' })).rejects.toBeInstanceOf(InvalidInputError);
    await expect(client.prompt({ tenant: 'sdk', sessionId: 'bad id' }, { text: 'x' })).rejects.toBeInstanceOf(InvalidInputError);
  });

  it('stops waiting when its signal aborts, already aborted or while the turn runs', async () => {
    await expect(client.ask({ tenant: 'sdk', sessionId: 'abort-1' }, { text: 'x' }, { signal: AbortSignal.abort() })).rejects.toThrow();
    const controller = new AbortController();
    const asked = client.ask({ tenant: 'sdk', sessionId: 'abort-2' }, { text: 'x' }, {
      signal: controller.signal,
      onEvent: ({ event }) => event.type === 'user.message' && controller.abort(new Error('enough')),
    });
    await expect(asked).rejects.toThrow('enough');
  });
});
