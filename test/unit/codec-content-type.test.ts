import { describe, expect, it } from 'vitest';
import { ContentType, createCodec } from '../../src/protocol/index.ts';
import { InvalidInputError, PayloadTooLargeError } from '../../src/errors.ts';

const codec = createCodec({ maxPayload: 64 });
const bytes = (text: string) => new TextEncoder().encode(text);

describe('codec content types', () => {
  it('decodes msgpack under its exact type, and under any spelling of it with parameters', () => {
    const packed = codec.encode({ a: 1 });
    expect(codec.decode(packed, ContentType.msgpack)).toEqual({ a: 1 });
    expect(codec.decode(packed, 'Application/MsgPack; charset=binary')).toEqual({ a: 1 });
    expect(() => codec.decode(bytes('{"a":1}'), ContentType.msgpack)).toThrow(InvalidInputError);
  });

  it('still bounds the payload, reads JSON and text, refuses other types and sniffs without one', () => {
    expect(() => codec.decode(new Uint8Array(65), ContentType.msgpack)).toThrow(PayloadTooLargeError);
    expect(codec.decode(bytes('{"a":1}'), 'application/json; charset=utf-8')).toEqual({ a: 1 });
    expect(codec.decode(bytes('hi'), ContentType.text)).toBe('hi');
    expect(() => codec.decode(bytes('hi'), 'image/png')).toThrow(InvalidInputError);
    expect(codec.decode(codec.encode({ b: 2 }))).toEqual({ b: 2 });
    expect(codec.decode(bytes('["x"]'))).toEqual(['x']);
    expect(codec.decode(bytes('plain words'))).toBe('plain words');
  });
});
