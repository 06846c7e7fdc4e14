import { describe, expect, it } from 'vitest';
import { headers as natsHeaders, MsgHdrsImpl } from '@nats-io/nats-core';
import { EncodedOnceHeaders, presetHeaders } from '../../src/bus/encoded-headers.ts';

const text = (bytes: Uint8Array) => new TextDecoder().decode(bytes);

describe('EncodedOnceHeaders', () => {
  it('encodes once while unchanged, and again after any change', () => {
    const headers = new EncodedOnceHeaders();
    headers.set('Content-Type', 'application/msgpack');
    const first = headers.encode();
    expect(headers.encode()).toBe(first);
    headers.set('Nats-Msg-Id', 'a1');
    const second = headers.encode();
    expect(second).not.toBe(first);
    expect(MsgHdrsImpl.decode(second).get('Nats-Msg-Id')).toBe('a1');
    headers.append('Nats-Msg-Id', 'a2');
    expect(MsgHdrsImpl.decode(headers.encode()).values('Nats-Msg-Id')).toEqual(['a1', 'a2']);
    headers.delete('Nats-Msg-Id');
    expect(text(headers.encode())).toBe(text(first));
  });
});

describe('presetHeaders', () => {
  it('encodes as nats.js headers set one by one do', () => {
    const entries = [['Content-Type', 'application/msgpack'], ['Nats-Msg-Id', 'x7'], ['Nats-Expected-Last-Subject-Sequence', '12']] as const;
    const reference = natsHeaders() as MsgHdrsImpl;
    for (const [key, value] of entries) reference.set(key, value);
    const preset = presetHeaders(entries);
    expect(text(preset.encode())).toBe(text(reference.encode()));
    expect(preset.get('Nats-Msg-Id')).toBe('x7');
  });

  it('refuses a value with a line break, as nats.js does', () => {
    expect(() => presetHeaders([['Nats-Msg-Id', 'a\r\nInjected: yes']])).toThrow();
  });
});
