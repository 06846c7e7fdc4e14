import { headers as createHeaders } from '@nats-io/nats-core';
import { describe, expect, it } from 'vitest';
import { DEFAULT_PREFIX, contentTypeOf, createCodec, prefixFromEnv } from '../../src/protocol/index.ts';

describe('contentTypeOf', () => {
  it('reads the declared Content-Type, and undefined for none or an empty one', () => {
    const declared = createHeaders();
    declared.set('Content-Type', 'application/json');
    expect(contentTypeOf({ headers: declared })).toBe('application/json');
    expect(contentTypeOf({ headers: createHeaders() })).toBeUndefined();
    expect(contentTypeOf({})).toBeUndefined();
  });

  it('is what the codec takes: a JSON body with its header decodes as JSON, one without is sniffed', () => {
    const codec = createCodec();
    const json = createHeaders();
    json.set('Content-Type', 'application/json');
    const body = new TextEncoder().encode('"text"');
    expect(codec.decode(body, contentTypeOf({ headers: json }))).toBe('text');
    expect(codec.decode(codec.encode({ a: 1 }), contentTypeOf({}))).toEqual({ a: 1 });
  });
});

describe('prefixFromEnv', () => {
  it('reads AGENTBUS_PREFIX, trimmed, and the default when it is unset or blank', () => {
    expect(prefixFromEnv({ AGENTBUS_PREFIX: 'acme.bus ' })).toBe('acme.bus');
    expect(prefixFromEnv({})).toBe(DEFAULT_PREFIX);
    expect(prefixFromEnv({ AGENTBUS_PREFIX: '  ' })).toBe(DEFAULT_PREFIX);
  });
});
