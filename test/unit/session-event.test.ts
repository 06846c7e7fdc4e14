import { describe, expect, it } from 'vitest';
import { InvalidInputError, PayloadTooLargeError } from '../../src/errors.ts';
import { LiveEventType, LogEventType, createCodec, createEnvelopeFactory, createSubjects, decodeSessionEvent } from '../../src/protocol/index.ts';

const codec = createCodec({ maxPayload: 4096 });
const subjects = createSubjects();
const envelopes = createEnvelopeFactory({ newId: () => 'id-1', now: () => 1_700_000_000_000 });
const session = { tenant: 'acme', sessionId: 's-1', turnId: 'turn-1', step: 1 };
const log = subjects.log('acme', 's-1');
const live = (type: string) => subjects.live('acme', 's-1', type);
const delta = envelopes.create(LiveEventType.assistantDelta, session, { text: 'Hi' });
const created = envelopes.create(LogEventType.sessionCreated, session, { createdBy: 'node-1' });
const ended = envelopes.create(LogEventType.turnEnded, session, { reason: 'yielded', usage: { inputTokens: 1, outputTokens: 1 }, cost: 0, steps: 1 });

const decode = (subject: string, value: unknown) => decodeSessionEvent(codec, subjects, { subject, data: codec.encode(value) });

describe('an event received on a session subject', () => {
  it('is a log event on the log subject and a live event of its type on live.<type>', () => {
    expect(decode(log, created)).toEqual(created);
    expect(decode(live('assistant.delta'), delta)).toEqual(delta);
  });

  it('comes back without the seq a message may claim', () => {
    expect(decode(log, { ...created, seq: 99 })).toEqual(created);
  });

  it('is read from JSON when the message says so', () => {
    const data = new TextEncoder().encode(JSON.stringify(delta));
    expect(decodeSessionEvent(codec, subjects, { subject: live('assistant.delta'), data, headers: { get: () => 'application/json' } })).toEqual(delta);
  });

  it.each([
    ['malformed msgpack', live('assistant.delta'), new Uint8Array([0x82, 0xa1]), 'malformed msgpack'],
    ['an event with malformed data', live('assistant.delta'), codec.encode({ ...delta, data: 5 }), 'invalid live event: data: Invalid input: expected object, received number'],
    ['a log event of another session on the log', log, codec.encode({ ...created, sessionId: 's-2' }), 'invalid log event: an event of acme/s-2 on a subject of acme/s-1'],
    ['a log event of another tenant on the log', log, codec.encode({ ...created, tenant: 'other' }), 'invalid log event: an event of other/s-1 on a subject of acme/s-1'],
    ['a live event of another session', live('assistant.delta'), codec.encode({ ...delta, sessionId: 's-2' }), 'invalid live event: an event of acme/s-2 on a subject of acme/s-1'],
    ['a log event on a live subject', live('turn.ended'), codec.encode(ended), 'invalid live event: type: Invalid discriminator value'],
    ['a live event on the log', log, codec.encode(delta), 'invalid log event: type: Invalid discriminator value'],
    ['a live event on the subject of another type', live('progress'), codec.encode(delta), 'invalid live event: type assistant.delta on live.progress'],
    ['a message on a subject that holds no events', subjects.session('acme', 's-1', 'prompt'), codec.encode(delta), 'agentbus.acme.sessions.s-1.prompt is not a session\'s log or live subject'],
    ['a message on a subject of no session', 'agentbus.tools.read_file.call', codec.encode(delta), 'is not a session\'s log or live subject'],
  ])('is refused when it is %s', (_, subject, data, message) => {
    const read = () => decodeSessionEvent(codec, subjects, { subject, data });
    expect(read).toThrow(InvalidInputError);
    expect(read).toThrow(message);
  });

  it('is refused when it is larger than the codec takes', () => {
    const big = codec.encode({ ...delta, data: { text: 'x'.repeat(5000) } });
    expect(() => decodeSessionEvent(codec, subjects, { subject: live('assistant.delta'), data: big })).toThrow(PayloadTooLargeError);
  });
});
