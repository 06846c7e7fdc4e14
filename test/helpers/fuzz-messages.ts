import fc from 'fast-check';
import { pack } from 'msgpackr';

/** One generated message for an ingress subject. */
export interface FuzzMessage {
  readonly data: Uint8Array;
  /** The Content-Type header to send, if any. */
  readonly contentType: string | undefined;
}

const encoder = new TextEncoder();

/** Values of every type, for fields that expect one. */
const anyValue = fc.oneof(
  fc.string(),
  fc.integer(),
  fc.double(),
  fc.boolean(),
  fc.constant(null),
  fc.array(fc.string(), { maxLength: 4 }),
  fc.dictionary(fc.string({ maxLength: 8 }), fc.string(), { maxKeys: 4 }),
);

/** Objects shaped like the bodies of the bus (prompt, approve, tool call, generate request), with wrong or missing fields. */
const shapedBody = fc.record(
  {
    v: fc.oneof(fc.constant(1), anyValue),
    text: fc.oneof(fc.string({ maxLength: 200 }), anyValue),
    model: fc.oneof(fc.constantFrom('scripted:default', 'nope:x', ':', ''), anyValue),
    maxSteps: fc.oneof(fc.integer({ min: -5, max: 100 }), anyValue),
    maxCost: anyValue,
    toolCallId: anyValue,
    approved: anyValue,
    callId: anyValue,
    requestId: anyValue,
    name: fc.oneof(fc.constantFrom('read_file', 'list_dir', '../etc'), anyValue),
    args: fc.oneof(fc.constant({ path: '../../etc/passwd' }), anyValue),
    messages: fc.oneof(fc.array(fc.record({ role: fc.constantFrom('user', 'tool', 'bogus'), content: anyValue }), { maxLength: 3 }), anyValue),
    deadline: anyValue,
    unknownField: anyValue,
  },
  { requiredKeys: [] },
);

const contentTypes = fc.constantFrom(undefined, 'application/json', 'application/msgpack', 'text/plain', 'application/x-bogus', 'application/json; charset=utf-8');

/**
 * Messages a careless or hostile client might send to any ingress: random bytes, broken and valid JSON of any
 * shape, msgpack of anything, and bodies shaped like ours with wrong types.
 */
export const fuzzMessage: fc.Arbitrary<FuzzMessage> = fc.oneof(
  { weight: 3, arbitrary: fc.record({ data: fc.uint8Array({ maxLength: 512 }), contentType: contentTypes }) },
  { weight: 3, arbitrary: fc.record({ data: fc.json().map((text) => encoder.encode(text)), contentType: contentTypes }) },
  { weight: 2, arbitrary: fc.record({ data: fc.string({ maxLength: 300 }).map((text) => encoder.encode(`{"text": ${text}`)), contentType: fc.constant('application/json') }) },
  { weight: 4, arbitrary: fc.record({ data: shapedBody.map((body) => encoder.encode(JSON.stringify(body))), contentType: fc.constant('application/json') }) },
  { weight: 4, arbitrary: fc.record({ data: shapedBody.map((body) => new Uint8Array(pack(body))), contentType: contentTypes }) },
  { weight: 2, arbitrary: fc.record({ data: fc.anything().map((value) => new Uint8Array(pack(value))), contentType: fc.constant('application/msgpack') }) },
);

/** Subject tokens where a tenant or session id goes: valid ones, and ones the runtime must refuse. */
export const fuzzToken = fc.oneof(
  { weight: 6, arbitrary: fc.constantFrom('acme', 'globex', 'default') },
  { weight: 1, arbitrary: fc.stringMatching(/^[A-Za-z0-9_-]{65,80}$/) },
  { weight: 1, arbitrary: fc.constantFrom('a$b', 'é', 'x~y', 'semi;colon', '%2e', 'ünï') },
);

/** Huge bodies, up to just under the server's 1 MiB max_payload (a larger one never leaves the client). */
export function hugeMessages(count: number): FuzzMessage[] {
  return Array.from({ length: count }, (_, index) => ({
    data: encoder.encode(JSON.stringify({ text: 'Z'.repeat(100_000 + ((index * 104_729) % 900_000)) })),
    contentType: index % 2 === 0 ? 'application/json' : undefined,
  }));
}
