import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { collectEvents, requestJson, startStack } from '../helpers/stack.ts';
import type { TestStack } from '../helpers/stack.ts';

let stack: TestStack;

beforeAll(async () => {
  stack = await startStack({
    script: {
      responses: [
        { text: 'before the restart' },
        { text: 'after the restart' },
        // Played twice: the stream cut by the restart, then the call made again.
        { text: 'a slow answer cut by a restart', chunkSize: 2, delayMs: 40 },
        { text: 'a slow answer cut by a restart', chunkSize: 2, delayMs: 40 },
      ],
    },
  });
});

afterAll(() => stack?.stop());

describe('a nats-server restart', () => {
  it('is survived: every service reconnects and the session goes on from its log', async () => {
    const watcher = collectEvents(stack.client, 'default', 'restart-1');
    await requestJson(stack.client, 'agentbus.default.sessions.restart-1.prompt', { text: 'one' });
    await watcher.until((events) => events.filter((event) => event.type === 'turn.ended').length === 1);

    await stack.server.restart();

    // Clients reconnect on their own; the first requests may race the resubscription.
    let reply: Awaited<ReturnType<typeof requestJson>> | undefined;
    for (let attempt = 0; attempt < 40 && !reply?.accepted; attempt++) {
      reply = await requestJson(stack.client, 'agentbus.default.sessions.restart-1.prompt', { text: 'two' }, 2000).catch(() => undefined);
      if (!reply?.accepted) await new Promise((resolve) => setTimeout(resolve, 250));
    }
    expect(reply).toMatchObject({ accepted: true });
    const events = await watcher.until((seen) => seen.filter((event) => event.type === 'turn.ended').length === 2, 15_000);
    expect(events.filter((event) => event.type === 'turn.ended').map((event) => event.type === 'turn.ended' && event.data.text)).toEqual([
      'before the restart',
      'after the restart',
    ]);
    watcher.stop();
  });

  it('in the middle of a stream makes the provider call again and the turn still yields', async () => {
    const watcher = collectEvents(stack.client, 'default', 'restart-1');
    // Right after the restart above: the node checks its leases before it acts again, and a bucket request it
    // sent while the connection was down waits its whole timeout first.
    await requestJson(stack.client, 'agentbus.default.sessions.restart-1.prompt', { text: 'three' }, 15_000);
    await watcher.until((events) => events.some((event) => event.type === 'assistant.delta'));
    await stack.server.restart();
    const events = await watcher.until((seen) => seen.some((event) => event.type === 'turn.ended'), 20_000);
    expect(events.find((event) => event.type === 'turn.ended')).toMatchObject({ data: { reason: 'yielded', text: 'a slow answer cut by a restart' } });
    watcher.stop();
  });
});
