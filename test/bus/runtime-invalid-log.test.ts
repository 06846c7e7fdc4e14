import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import type { Msg } from '@nats-io/nats-core';
import { jetstream, jetstreamManager } from '@nats-io/jetstream';
import { createSessionLog } from '../../src/bus/session-log.ts';
import { createCodec, createSubjects, streamNames } from '../../src/protocol/index.ts';
import type { AgentEvent, GenerateRequest } from '../../src/protocol/index.ts';
import { collectEvents, requestJson, startStack } from '../helpers/stack.ts';
import type { TestStack } from '../helpers/stack.ts';
import { captureLogs } from '../helpers/captured-logs.ts';

const codec = createCodec();
const endedCount = (count: number) => (events: AgentEvent[]) => events.filter((event) => event.type === 'turn.ended').length >= count;

/** Log lines at warn or above, parsed, as pino writes them. */
// The log subject is captured by AGENTBUS_LOG, so on a server without permissions anyone can store a message
// there. The runtime reads the log back when it opens a session: a junk message must be skipped and reported,
// not break the session or its transcript.
describe('a session whose log holds a message that is not a valid event', () => {
  let stack: TestStack;
  const warnings = captureLogs();
  beforeAll(async () => {
    stack = await startStack({
      script: { responses: [{ toolCalls: [{ name: 'read_file', args: { path: 'README.md' } }] }, { text: 'first answer' }, { text: 'second answer' }] },
      runtime: { idleMs: 1, leaseTtlMs: 900 },
      logger: warnings.logger,
    });
  });
  afterAll(() => stack?.stop());

  it('is reopened without it: the next turn yields and its model call sees the earlier turn', async () => {
    const subject = 'agentbus.default.sessions.junk-1.log';
    const requests: GenerateRequest[] = [];
    const spy = stack.client.subscribe('agentbus.provider.scripted.generate', {
      callback: (_error, message: Msg) => {
        requests.push(codec.decode(message.data, message.headers?.get('Content-Type')) as GenerateRequest);
      },
    });
    const watcher = collectEvents(stack.client, 'default', 'junk-1');
    expect((await requestJson(stack.client, 'agentbus.default.sessions.junk-1.prompt', { text: 'one' })).accepted).toBe(true);
    await watcher.until(endedCount(1));

    // Stored by JetStream (a request gets its PubAck) as the session's last message: the runtime's next append
    // must expect its sequence, though the transcript skips it.
    const ack = codec.decode((await stack.client.request(subject, codec.encode({ v: 1, id: 'junk', type: 'tool.result', tenant: 'default', sessionId: 'junk-1', ts: 1, data: 5 }))).data) as { seq: number };
    expect(ack.seq).toBeGreaterThan(0);

    const passivated = Date.now() + 5000;
    while (stack.runtime.sessions() > 0 && Date.now() < passivated) await new Promise((resolve) => setTimeout(resolve, 50));
    expect(stack.runtime.sessions()).toBe(0);

    const second = await requestJson(stack.client, 'agentbus.default.sessions.junk-1.prompt', { text: 'two' });
    expect(second.error).toBeUndefined();
    expect(second.accepted).toBe(true);
    const events = await watcher.until(endedCount(2));
    spy.unsubscribe();
    watcher.stop();

    const reasons = events.filter((event) => event.type === 'turn.ended').map((event) => (event as Extract<AgentEvent, { type: 'turn.ended' }>).data.reason);
    expect(reasons).toEqual(['yielded', 'yielded']);
    const last = requests.at(-1)!;
    expect(last.messages.map((message) => message.content)).toEqual(expect.arrayContaining(['one', 'first answer', 'two']));
    expect(last.messages.some((message) => message.role === 'tool' && message.content.includes('Hello from the workspace'))).toBe(true);

    const skipped = warnings.lines.filter((line) => line.msg === 'skipped an invalid message in a session log');
    expect(skipped).toEqual([expect.objectContaining({ level: 40, tenant: 'default', sessionId: 'junk-1', seq: ack.seq, subject })]);
  });

  it('keeps every event the runtime wrote valid: reading the log back skips only the junk', async () => {
    const own = captureLogs();
    const log = createSessionLog({ nc: stack.client, js: jetstream(stack.client), subjects: createSubjects(), codec, stream: streamNames().log, logger: own.logger });
    const { events } = await log.read('default', 'junk-1');
    expect(own.lines.map((line) => line.msg)).toEqual(['skipped an invalid message in a session log']);
    expect(events.map((event) => event.type)).toEqual([
      'session.created',
      'user.message',
      'turn.started',
      'assistant.message',
      'tool.use',
      'tool.result',
      'assistant.message',
      'turn.ended',
      'user.message',
      'turn.started',
      'assistant.message',
      'turn.ended',
    ]);
  });
});
