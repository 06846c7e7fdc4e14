import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { connect } from '@nats-io/transport-node';
import type { NatsConnection } from '@nats-io/nats-core';
import { coalesceWrites, flushWrites } from '../../src/bus/coalesce-writes.ts';
import { startNatsServer } from '../helpers/nats-server.ts';
import type { TestNatsServer } from '../helpers/nats-server.ts';

/** Counts the frames a connection hands its transport (each one socket write). */
function countWrites(nc: NatsConnection): () => number {
  const transport = (nc as unknown as { protocol: { transport: { send(frame: Uint8Array): void } } }).protocol.transport;
  const send = transport.send.bind(transport);
  let writes = 0;
  transport.send = (frame) => {
    writes += 1;
    send(frame);
  };
  return () => writes;
}

/** Publishes `count` messages on `subject`, each from its own microtask, as async chains of a busy node do. */
async function publishApart(nc: NatsConnection, subject: string, count: number): Promise<void> {
  await Promise.all(
    Array.from({ length: count }, async (_, index) => {
      for (let hop = 0; hop < index; hop++) await Promise.resolve();
      nc.publish(subject, new TextEncoder().encode(String(index)));
    }),
  );
}

describe('coalesced socket writes', () => {
  let server: TestNatsServer;
  let reader: NatsConnection;

  beforeAll(async () => {
    server = await startNatsServer();
    reader = await connect({ servers: server.url });
  });

  afterAll(async () => {
    await reader?.close();
    await server?.stop();
  });

  async function received(subject: string, count: number, publish: (subject: string) => Promise<void>): Promise<string[]> {
    const seen: string[] = [];
    const subscription = reader.subscribe(subject, { max: count });
    await reader.flush();
    const done = (async () => {
      for await (const message of subscription) seen.push(message.string());
    })();
    await publish(subject);
    await Promise.race([done, new Promise((_, reject) => setTimeout(() => reject(new Error(`only ${seen.length} of ${count} arrived`)), 10_000))]);
    return seen;
  }

  it('writes what is published from many microtasks in one loop turn as one write, in order', async () => {
    const plain = await connect({ servers: server.url });
    const coalesced = await connect({ servers: server.url });
    expect(coalesceWrites(coalesced)).toBe(true);
    expect(coalesceWrites(coalesced)).toBe(true);
    const plainWrites = countWrites(plain);
    const coalescedWrites = countWrites(coalesced);
    const expected = Array.from({ length: 50 }, (_, index) => String(index));
    expect(await received('plain.writes', 50, (subject) => publishApart(plain, subject, 50))).toEqual(expected);
    expect(await received('coalesced.writes', 50, (subject) => publishApart(coalesced, subject, 50))).toEqual(expected);
    expect(plainWrites()).toBe(50);
    expect(coalescedWrites()).toBe(1);
    await plain.close();
    await coalesced.close();
  });

  it('writes what is buffered when the connection closes', async () => {
    const coalesced = await connect({ servers: server.url });
    coalesceWrites(coalesced);
    const seen = await received('closing.writes', 3, async (subject) => {
      for (const text of ['a', 'b', 'c']) coalesced.publish(subject, new TextEncoder().encode(text));
      await coalesced.close();
    });
    expect(seen).toEqual(['a', 'b', 'c']);
  });

  it('writes a buffer past nats.js threshold at once, without waiting for the loop', async () => {
    const coalesced = await connect({ servers: server.url });
    coalesceWrites(coalesced);
    const writes = countWrites(coalesced);
    const big = new Uint8Array(40 * 1024);
    const seen = await received('big.writes', 2, async (subject) => {
      coalesced.publish(subject, big);
      expect(writes()).toBe(0);
      // The second passes the threshold: both go out in one write before this code gives the loop a turn.
      coalesced.publish(subject, big);
      expect(writes()).toBe(1);
    });
    expect(seen).toHaveLength(2);
    await coalesced.close();
  });
  it('writes what is buffered at once when asked (flushWrites), and what follows in the loop turn in one more write', async () => {
    const coalesced = await connect({ servers: server.url });
    const plain = await connect({ servers: server.url });
    coalesceWrites(coalesced);
    const writes = countWrites(coalesced);
    const plainWrites = countWrites(plain);
    const seen = await received('flushed.writes', 4, async (subject) => {
      coalesced.publish(subject, new TextEncoder().encode('0'));
      flushWrites(coalesced);
      expect(writes()).toBe(1);
      await publishApart(coalesced, subject, 3);
      expect(writes()).toBe(1);
      // A connection whose writes are not coalesced is left alone.
      flushWrites(plain);
      expect(plainWrites()).toBe(0);
    });
    expect(seen).toEqual(['0', '0', '1', '2']);
    expect(writes()).toBe(2);
    await coalesced.close();
    await plain.close();
  });
});
