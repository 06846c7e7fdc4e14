import { describe, expect, it } from 'vitest';
import { pubAckReader } from '../../src/bus/pub-ack.ts';
import { InvalidInputError } from '../../src/errors.ts';
import { createCodec } from '../../src/protocol/index.ts';

const bytes = (text: string) => new TextEncoder().encode(text);
const readAck = pubAckReader(createCodec(), 'AGENTBUS_LOG');

describe('pubAckReader', () => {
  it('reads the common ack from its bytes', () => {
    expect(readAck(bytes('{"stream":"AGENTBUS_LOG","seq":1}'))).toEqual({ stream: 'AGENTBUS_LOG', seq: 1 });
    expect(readAck(bytes('{"stream":"AGENTBUS_LOG","seq":123456789012345}'))).toEqual({ stream: 'AGENTBUS_LOG', seq: 123456789012345 });
  });

  it('reads the common ack of nats-server 2.9 (a space after the comma) from its bytes too, without parsing JSON', () => {
    const codec = createCodec();
    let decoded = 0;
    const counting = pubAckReader({ ...codec, decode: (...args) => (decoded++, codec.decode(...args)) }, 'AGENTBUS_LOG');
    expect(counting(bytes('{"stream":"AGENTBUS_LOG", "seq":1}'))).toEqual({ stream: 'AGENTBUS_LOG', seq: 1 });
    expect(counting(bytes('{"stream":"AGENTBUS_LOG","seq":42}'))).toEqual({ stream: 'AGENTBUS_LOG', seq: 42 });
    expect(decoded).toBe(0);
    // Two spaces, or a space elsewhere, is not the common shape: parsed, with the same result.
    expect(counting(bytes('{"stream":"AGENTBUS_LOG",  "seq":3}'))).toEqual({ stream: 'AGENTBUS_LOG', seq: 3 });
    expect(counting(bytes('{"stream":"AGENTBUS_LOG", "seq": 4}'))).toEqual({ stream: 'AGENTBUS_LOG', seq: 4 });
    expect(decoded).toBe(2);
  });

  it('parses any other shape as JSON: duplicates, a domain, another stream, spaces', () => {
    expect(readAck(bytes('{"stream":"AGENTBUS_LOG","seq":7,"duplicate":true}'))).toEqual({ stream: 'AGENTBUS_LOG', seq: 7, duplicate: true });
    expect(readAck(bytes('{"stream":"AGENTBUS_LOG","domain":"hub","seq":8}'))).toEqual({ stream: 'AGENTBUS_LOG', seq: 8 });
    expect(readAck(bytes('{"stream":"OTHER","seq":9}'))).toEqual({ stream: 'OTHER', seq: 9 });
    expect(readAck(bytes('{ "stream": "AGENTBUS_LOG", "seq": 10 }'))).toEqual({ stream: 'AGENTBUS_LOG', seq: 10 });
  });

  it('hands refusals and malformed acks to the schema', () => {
    const refused = readAck(bytes('{"error":{"code":400,"err_code":10071,"description":"wrong last sequence: 3"},"stream":"AGENTBUS_LOG","seq":0}'));
    expect(refused.error).toEqual({ code: 400, err_code: 10071, description: 'wrong last sequence: 3' });
    expect(() => readAck(bytes('{"stream":"AGENTBUS_LOG","seq":1x}'))).toThrow(InvalidInputError);
    expect(() => readAck(bytes('{"stream":"AGENTBUS_LOG","seq":-1}'))).toThrow(InvalidInputError);
    expect(() => readAck(bytes('{"stream":"AGENTBUS_LOG","seq":}'))).toThrow(InvalidInputError);
    expect(() => readAck(bytes('{"stream":"AGENTBUS_LOG", "seq":}'))).toThrow(InvalidInputError);
    expect(() => readAck(bytes('{"stream":"AGENTBUS_LOG","seq":1234567890123456789}'))).toThrow(InvalidInputError);
  });
});
