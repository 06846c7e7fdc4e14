import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { createAgentbusClient } from '../src/client/index.ts';
import type { AgentbusClient, StreamedEvent } from '../src/client/index.ts';
import { InvalidInputError } from '../src/errors.ts';
import { startStack } from './helpers/stack.ts';
import type { TestStack } from './helpers/stack.ts';

let stack: TestStack;
let client: AgentbusClient;

beforeAll(async () => {
  stack = await startStack({
    script: {
      responses: [
        { text: 'Reading.', toolCalls: [{ name: 'read_file', args: { path: 'README.md' } }] },
        { text: 'It says hello.', chunkSize: 3 },
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
