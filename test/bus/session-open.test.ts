import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import type { Msg } from '@nats-io/nats-core';
import { createCodec } from '../../src/protocol/index.ts';
import type { AgentEvent, GenerateRequest } from '../../src/protocol/index.ts';
import { collectEvents, requestJson, startStack } from '../helpers/stack.ts';
import type { TestStack } from '../helpers/stack.ts';

const codec = createCodec();
const endedCount = (count: number) => (events: AgentEvent[]) => events.filter((event) => event.type === 'turn.ended').length >= count;

// Passivation deletes a session's lease, so "this node just created the lease" does not mean "the log is
// empty": a session opened that way must still be read back, and must not get a second `session.created`.
// (Skipping the read and relying on `Nats-Expected-Last-Subject-Sequence: 0` keeps the log right, since
// JetStream refuses that append, but a client subscribed to the session's subjects with core NATS still
// receives the refused `session.created`: a publish reaches core subscribers whether or not a stream stores it.)
describe('reopening a passivated session', () => {
  let stack: TestStack;
  beforeAll(async () => {
    stack = await startStack({ script: { responses: [{ text: 'first answer' }] }, runtime: { idleMs: 1, leaseTtlMs: 900 } });
  });
  afterAll(() => stack?.stop());

  it('writes session.created once for a new session and reads the log of a passivated one', async () => {
    const requests: GenerateRequest[] = [];
    const spy = stack.client.subscribe('agentbus.provider.scripted.generate', {
      callback: (_error, message: Msg) => {
        requests.push(codec.decode(message.data, message.headers?.get('Content-Type')) as GenerateRequest);
      },
    });
    const watcher = collectEvents(stack.client, 'default', 'reopen-1');
    const first = await requestJson(stack.client, 'agentbus.default.sessions.reopen-1.prompt', { text: 'one' });
    expect(first.accepted).toBe(true);
    await watcher.until(endedCount(1));

    const passivated = Date.now() + 5000;
    while (stack.runtime.sessions() > 0 && Date.now() < passivated) await new Promise((resolve) => setTimeout(resolve, 50));
    expect(stack.runtime.sessions()).toBe(0);

    const second = await requestJson(stack.client, 'agentbus.default.sessions.reopen-1.prompt', { text: 'two' });
    expect(second.accepted).toBe(true);
    const events = await watcher.until(endedCount(2));
    spy.unsubscribe();
    watcher.stop();

    expect(events.filter((event) => event.type === 'session.created')).toHaveLength(1);
    expect(events.filter((event) => event.type === 'user.message')).toHaveLength(2);
    expect(events.filter((event) => event.type === 'turn.ended').map((event) => (event as Extract<AgentEvent, { type: 'turn.ended' }>).data.reason)).toEqual(['yielded', 'yielded']);
    // The second turn's model call sees the first turn, read back from the log.
    const last = requests.at(-1)!;
    expect(last.messages.map((message) => message.content)).toEqual(expect.arrayContaining(['one', 'first answer', 'two']));
  });
});
