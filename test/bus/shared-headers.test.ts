import { describe, expect, it } from 'vitest';
import { headers as natsHeaders } from '@nats-io/nats-core';
import type { Msg } from '@nats-io/nats-core';
import { createHeaderSharing } from '../../src/bus/shared-headers.ts';
import { useNatsServer } from '../helpers/nats-fixture.ts';

const nats = useNatsServer();

/** Publishes `count` messages with the headers each `make(i)` returns and collects them as received. */
async function receive(count: number, make: (index: number) => ReturnType<typeof natsHeaders> | undefined, body = 'x'): Promise<Msg[]> {
  const { nc } = nats;
  const subject = `shared.headers.${Math.random().toString(36).slice(2)}`;
  const received: Msg[] = [];
  const done = new Promise<void>((resolve) => {
    nc.subscribe(subject, {
      max: count,
      callback: (_error, message) => {
        received.push(message);
        if (received.length === count) resolve();
      },
    });
  });
  await nc.flush();
  for (let index = 0; index < count; index++) {
    const headers = make(index);
    nc.publish(subject, body, headers ? { headers } : {});
  }
  await done;
  return received;
}

describe('header sharing', () => {
  it('gives messages with the same header bytes one decoded headers object, which reads as nats.js decodes it', async () => {
    const make = (index: number) => {
      const headers = natsHeaders();
      headers.set('Content-Type', 'application/msgpack');
      if (index % 2 === 1) headers.set('Agentbus-Event', 'heartbeat');
      return headers;
    };
    const plain = await receive(4, make);
    const shared = await receive(4, make);
    const share = createHeaderSharing();
    for (const message of shared) share(message);
    expect(shared[0]!.headers).toBe(shared[2]!.headers);
    expect(shared[1]!.headers).toBe(shared[3]!.headers);
    expect(shared[0]!.headers).not.toBe(shared[1]!.headers);
    for (const [index, message] of shared.entries()) {
      const reference = plain[index]!.headers!;
      expect(message.headers!.get('Content-Type')).toBe(reference.get('Content-Type'));
      expect(message.headers!.get('Agentbus-Event')).toBe(reference.get('Agentbus-Event'));
      expect(message.headers!.has('Agentbus-Event')).toBe(reference.has('Agentbus-Event'));
      expect(message.headers!.get('Absent')).toBe('');
      expect([...message.headers!]).toEqual([...reference]);
      expect(message.headers!.code).toBe(reference.code);
      expect(new TextDecoder().decode(message.data)).toBe('x');
    }
  });

  it('hands out read-only headers, and leaves messages without headers or with headers read alone', async () => {
    const make = () => {
      const headers = natsHeaders();
      headers.set('Content-Type', 'application/msgpack');
      return headers;
    };
    const [first, second] = await receive(2, make);
    const share = createHeaderSharing();
    const own = second!.headers;
    share(first!);
    share(second!);
    expect(second!.headers).toBe(own);
    expect(() => first!.headers!.set('Content-Type', 'text/plain')).toThrow(TypeError);
    expect(() => first!.headers!.append('X', 'y')).toThrow(TypeError);
    expect(() => first!.headers!.delete('Content-Type')).toThrow(TypeError);
    const [bare] = await receive(1, () => undefined);
    share(bare!);
    expect(bare!.headers).toBeUndefined();
  });

  it('leaves a header block nats.js cannot read to fail where it is read, as without sharing', () => {
    const bytes = new TextEncoder().encode('NATS/1.0\r\nBad Key: v\r\n\r\nbody');
    // The fields of nats.js' MsgImpl the sharing reads: a header block of 24 bytes, not read yet.
    const message = { _msg: { hdr: 24 }, _rdata: bytes, _headers: undefined } as unknown as Msg;
    const share = createHeaderSharing();
    expect(() => share(message)).not.toThrow();
    expect((message as unknown as { _headers: unknown })._headers).toBeUndefined();
  });

  it('keeps the last blocks it saw: a message like an older one past the slots decodes its own again', async () => {
    const make = (index: number) => {
      const headers = natsHeaders();
      headers.set('Id', String(index % 3));
      return headers;
    };
    const messages = await receive(4, make);
    const share = createHeaderSharing({ slots: 2 });
    for (const message of messages) share(message);
    // 0, 1, 2 fill two slots in turn (2 replaces 0), so the fourth (0 again) gets headers of its own.
    expect(messages[3]!.headers).not.toBe(messages[0]!.headers);
    expect(messages.map((message) => message.headers!.get('Id'))).toEqual(['0', '1', '2', '0']);
  });
});
