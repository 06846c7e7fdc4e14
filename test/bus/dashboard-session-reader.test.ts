import { beforeAll, describe, expect, it } from 'vitest';
import { jetstream, jetstreamManager } from '@nats-io/jetstream';
import { createSessionLog } from '../../src/bus/session-log.ts';
import { ensureStreams } from '../../src/bus/streams.ts';
import { LiveEventType, createCodec, createEnvelopeFactory, createSubjects, streamNames } from '../../src/protocol/index.ts';
import { createSessionReader } from '../../services/dashboard/session-reader.ts';
import { useNatsServer } from '../helpers/nats-fixture.ts';
import { silentLogger } from '../helpers/stack.ts';

// What the dashboard reads of a session's live stream when a page opens it: the newest state changes must come
// even when the session streamed more deltas than the reader's bound.

const nats = useNatsServer();
const codec = createCodec();
const subjects = createSubjects();
let id = 0;
const envelopes = createEnvelopeFactory({ newId: () => `e${id++}`, now: Date.now });

beforeAll(async () => {
  await ensureStreams(await jetstreamManager(nats.nc), { prefix: 'agentbus' });
});

/** Publishes `deltas` text deltas, with a state change after every 10 of them, to one session's live stream. */
async function stream(sessionId: string, deltas: number): Promise<void> {
  const js = jetstream(nats.nc);
  const scope = { tenant: 'acme', sessionId, turnId: 't1', step: 1 };
  for (let index = 1; index <= deltas; index++) {
    await js.publish(subjects.live('acme', sessionId, LiveEventType.assistantDelta), codec.encode(envelopes.create(LiveEventType.assistantDelta, scope, { text: `d${index} ` })));
    if (index % 10 === 0) {
      const state = envelopes.create(LiveEventType.state, scope, { machine: 'turn', value: `Streaming-${index}`, event: 'tick' });
      await js.publish(subjects.live('acme', sessionId, LiveEventType.state), codec.encode(state));
    }
  }
}

async function reader(maxLive: number) {
  const js = jetstream(nats.nc);
  const names = streamNames();
  const log = createSessionLog({ nc: nats.nc, js, subjects, codec, stream: names.log, logger: silentLogger() });
  return createSessionReader({ log, js, jsm: await jetstreamManager(nats.nc), subjects, codec, streams: names, logger: silentLogger(), maxLive });
}

describe("the dashboard's session reader", () => {
  it('reads every live event of a session within its bound, deltas included, in order', async () => {
    await stream('small', 30);
    const { live } = await (await reader(1000)).read('acme', 'small');
    expect(live).toHaveLength(33);
    expect(live.filter((event) => event.type === 'state').map((event) => event.data)).toEqual([10, 20, 30].map((at) => expect.objectContaining({ value: `Streaming-${at}` })));
  });

  it('reads the newest state changes of a session with more live events than its bound, leaving its deltas out', async () => {
    await stream('chatty', 200);
    const { live } = await (await reader(50)).read('acme', 'chatty');
    expect(live.some((event) => event.type === 'assistant.delta')).toBe(false);
    const states = live.filter((event) => event.type === 'state').map((event) => (event.data as { value: string }).value);
    expect(states).toHaveLength(20);
    expect(states.at(-1)).toBe('Streaming-200');
  });

  it('keeps the newest of a live type that alone passes the bound, not its oldest', async () => {
    await stream('stately', 100);
    const { live } = await (await reader(4)).read('acme', 'stately');
    expect(live.map((event) => (event.data as { value: string }).value)).toEqual(['Streaming-70', 'Streaming-80', 'Streaming-90', 'Streaming-100']);
  });
});
