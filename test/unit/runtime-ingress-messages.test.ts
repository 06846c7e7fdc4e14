import { describe, expect, it } from 'vitest';
import { headers } from '@nats-io/nats-core';
import type { Msg } from '@nats-io/nats-core';
import { SessionVerb, createCodec, createSubjects } from '../../src/protocol/index.ts';
import { createRefusalLog } from '../../src/refusal-log.ts';
import { createAdmission } from '../../services/runtime/ingress/admission.ts';
import { ForwardHeader, MAX_FORWARD_HOPS, asClientMessage, directOrigin, forwardHeaders, forwardedOrigin } from '../../services/runtime/ingress/forward.ts';
import type { MessageOrigin, SessionMessage } from '../../services/runtime/ingress/forward.ts';
import { createParkedMessages } from '../../services/runtime/ingress/parked-messages.ts';
import { createSessionMessageHandler } from '../../services/runtime/ingress/session-messages.ts';
import type { SessionMessageDeps } from '../../services/runtime/ingress/session-messages.ts';
import type { SessionLeases } from '../../services/runtime/node/leases.ts';
import type { HostedSessions } from '../../services/runtime/sessions/hosted-sessions.ts';
import { silentLogger } from '../helpers/stack.ts';

// The ingress's pure parts, without NATS: what a forward carries, and what a node does with a message of a
// session another node holds (keep a copy, pass it on, at most MAX_FORWARD_HOPS times).

const codec = createCodec();
const subjects = createSubjects('agentbus');

function clientMessage(subject: string, reply = '_R_.abc.def'): SessionMessage {
  const own = headers();
  own.set('Content-Type', 'application/json');
  return { subject, data: new TextEncoder().encode('{"text":"hi"}'), headers: own, reply, respond: () => true };
}

describe('forward headers', () => {
  it("carry the client's subject, reply subject and content type, and count hops", () => {
    const message = clientMessage('agentbus.acme.sessions.s1.prompt');
    const first = forwardHeaders(message, directOrigin(message));
    expect(first.get('Content-Type')).toBe('application/json');
    expect(first.get(ForwardHeader.reply)).toBe('_R_.abc.def');
    const received = { subject: 'agentbus.runtime.node-b.forward', data: message.data, headers: first, reply: '' } as unknown as Msg;
    expect(forwardedOrigin(received)).toEqual({ subject: 'agentbus.acme.sessions.s1.prompt', hops: 1 });
    const published: Array<{ subject: string }> = [];
    const asClient = asClientMessage(received, (subject) => published.push({ subject }));
    expect(asClient.reply).toBe('_R_.abc.def');
    expect(asClient.respond(new Uint8Array([1]))).toBe(true);
    expect(published).toEqual([{ subject: '_R_.abc.def' }]);
    // Passed on again: the hop count goes up, the client's headers stay as they were.
    const second = forwardHeaders(asClient, { subject: 'agentbus.acme.sessions.s1.prompt', hops: 1 });
    expect(second.get(ForwardHeader.hops)).toBe('2');
    expect(second.values('Content-Type')).toEqual(['application/json']);
  });

  it('make a message without them, or past the hop limit, no forward at all', () => {
    const bare = { subject: 'agentbus.runtime.node-b.forward', data: new Uint8Array(), headers: undefined, reply: '' } as unknown as Msg;
    expect(forwardedOrigin(bare)).toBeUndefined();
    const tooFar = headers();
    tooFar.set(ForwardHeader.subject, 'agentbus.acme.sessions.s1.prompt');
    tooFar.set(ForwardHeader.hops, String(MAX_FORWARD_HOPS + 1));
    expect(forwardedOrigin({ ...bare, headers: tooFar } as Msg)).toBeUndefined();
  });
});

describe('a message of a session another node holds', () => {
  function handlerWith(options: { owner: string; alone?: boolean; stopping?: boolean; forward?: boolean }) {
    const parked = createParkedMessages({ keepMs: 10_000, maxBytes: 1024 * 1024, clock: () => 0 });
    const forwarded: Array<{ owner: string; origin: MessageOrigin }> = [];
    const dropped: string[] = [];
    const claims: Array<{ active?: boolean; presume?: boolean } | undefined> = [];
    const leases = {
      claim: async (_tenant: string, _sessionId: string, claim?: { active?: boolean; presume?: boolean }) => {
        claims.push(claim);
        return { held: false, owner: options.owner, ...(options.alone ? { alone: true } : {}) };
      },
    } as unknown as SessionLeases;
    const sessions = { dropLost: (_tenant: string, sessionId: string) => dropped.push(sessionId) } as unknown as HostedSessions;
    const deps = {
      codec,
      subjects,
      config: { ceilings: { maxSteps: 32 } },
      logger: silentLogger(),
      admission: createAdmission({ maxPromptBytes: 0, sessionRate: { perSecond: 0, burst: 0 }, tenantRate: { perSecond: 0, burst: 0 } }, () => 0),
      refusals: createRefusalLog({ logger: silentLogger() }),
      leases,
      sessions,
      parked,
      stopping: () => options.stopping === true,
      ...(options.forward === false ? {} : { forward: (owner: string, _message: SessionMessage, origin: MessageOrigin) => forwarded.push({ owner, origin }) }),
    } as unknown as SessionMessageDeps;
    return { handler: createSessionMessageHandler(deps), parked, forwarded, dropped, claims };
  }

  /** A message whose replies are recorded, decoded. */
  function answered(subject: string) {
    const replies: unknown[] = [];
    const message = { ...clientMessage(subject), respond: (data?: Uint8Array) => replies.push(codec.decode(data!)) > 0 };
    return { message, replies };
  }

  it('asks the leases to presume the holder only when every node heard it, and never for a kept message replayed', async () => {
    const broadcast = handlerWith({ owner: 'node-b', forward: false });
    const message = clientMessage('agentbus.acme.sessions.s1.prompt');
    await broadcast.handler.handle(SessionVerb.prompt, message, directOrigin(message));
    await broadcast.handler.handle(SessionVerb.prompt, message, directOrigin(message), { replayed: true });
    expect(broadcast.claims).toEqual([{ active: true, presume: true }, { active: true }]);
    const queue = handlerWith({ owner: 'node-b' });
    await queue.handler.handle(SessionVerb.cancel, message, directOrigin(message));
    expect(queue.claims).toEqual([{}]);
  });

  it('is answered "send again" when the bucket did not answer and no other node tried: the pick of a settled fleet, or queue ingress', async () => {
    for (const options of [{ owner: '', alone: true, forward: false }, { owner: '' }]) {
      const { handler, parked } = handlerWith(options);
      const { message, replies } = answered('agentbus.acme.sessions.s1.prompt');
      await handler.handle(SessionVerb.prompt, message, directOrigin(message));
      expect(replies).toMatchObject([{ accepted: false, sessionId: 's1', error: { code: 'unavailable', retryable: true } }]);
      expect(parked.take('')).toHaveLength(0);
    }
  });

  it('is not answered when the bucket did not answer but other nodes tried too (an unsettled broadcast fleet)', async () => {
    const { handler } = handlerWith({ owner: '', forward: false });
    const { message, replies } = answered('agentbus.acme.sessions.s1.steer');
    await handler.handle(SessionVerb.steer, message, directOrigin(message));
    expect(replies).toEqual([]);
  });

  it('is kept for its holder and passed on to it (queue ingress)', async () => {
    const { handler, parked, forwarded } = handlerWith({ owner: 'node-b' });
    const message = clientMessage('agentbus.acme.sessions.s1.prompt');
    await handler.handle(SessionVerb.prompt, message, directOrigin(message));
    expect(forwarded).toEqual([{ owner: 'node-b', origin: { subject: 'agentbus.acme.sessions.s1.prompt', hops: 0 } }]);
    expect(parked.take('node-b').map((entry) => entry.message)).toEqual([message]);
  });

  it('is only kept when every node heard it (broadcast ingress: no forward)', async () => {
    const { handler, parked, forwarded } = handlerWith({ owner: 'node-b', forward: false });
    const message = clientMessage('agentbus.acme.sessions.s1.cancel');
    await handler.handle(SessionVerb.cancel, message, directOrigin(message));
    expect(forwarded).toEqual([]);
    expect(parked.take('node-b')).toHaveLength(1);
  });

  it('is passed on but not kept by a node that stops, and not passed on past the hop limit', async () => {
    const stopping = handlerWith({ owner: 'node-b', stopping: true });
    const message = clientMessage('agentbus.acme.sessions.s1.steer');
    await stopping.handler.handle(SessionVerb.steer, message, directOrigin(message));
    expect(stopping.forwarded).toHaveLength(1);
    expect(stopping.parked.take('node-b')).toHaveLength(0);
    const far = handlerWith({ owner: 'node-c' });
    await far.handler.handle(SessionVerb.steer, message, { subject: message.subject, hops: MAX_FORWARD_HOPS });
    expect(far.forwarded).toEqual([]);
    // Kept still: if node-c turns out dead, this node claims the session and answers it.
    expect(far.parked.take('node-c')).toHaveLength(1);
  });
});
