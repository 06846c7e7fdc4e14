import { randomBytes } from 'node:crypto';
import type { Msg, NatsConnection } from '@nats-io/nats-core';
import { createServiceRegistration } from '../../src/bus/service-registry.ts';
import { createCodec } from '../../src/protocol/index.ts';

/** A provider (`chaos:*`) and a tool (`chaos`) on the bus that answer with garbage, for fuzzing what the runtime receives. */
export interface ChaosServices {
  /** Replies and chunks sent so far. */
  repliesSent(): number;
  stop(): Promise<void>;
}

/** A small seeded generator, so a failing run can be replayed. */
function createRandom(seed: number) {
  let state = seed >>> 0 || 1;
  const next = () => {
    state ^= state << 13;
    state ^= state >>> 17;
    state ^= state << 5;
    return (state >>> 0) / 0x1_0000_0000;
  };
  return { next, int: (below: number) => Math.floor(next() * below), chance: (p: number) => next() < p };
}

/**
 * Starts the chaos provider and tool on `nc`. The provider streams a mix of valid chunks, chunks out of
 * sequence, of another request, of unknown types, raw bytes, and sometimes nothing or no end; it asks for the
 * chaos tool now and then. The tool replies raw bytes, wrong call ids, half errors, or nothing.
 */
export async function startChaosServices(nc: NatsConnection, options: { seed: number }): Promise<ChaosServices> {
  const codec = createCodec();
  const random = createRandom(options.seed);
  let sent = 0;
  const respond = (message: Msg, data: Uint8Array | unknown) => {
    if (!message.reply) return;
    nc.publish(message.reply, data instanceof Uint8Array ? data : codec.encode(data));
    sent += 1;
  };

  const generate = nc.subscribe('agentbus.provider.chaos.generate', {
    callback: (_error, message) => {
      let requestId = 'unknown';
      try {
        requestId = String((codec.decode(message.data, message.headers?.get('Content-Type')) as { requestId?: unknown }).requestId);
      } catch {
        // A garbage request is fine here: this provider is garbage too.
      }
      if (random.chance(0.1)) return; // silence: the runtime's idle timeout must end it
      let seq = 0;
      const count = 1 + random.int(12);
      for (let index = 0; index < count; index++) {
        const roll = random.int(9);
        if (roll === 0) respond(message, randomBytes(random.int(64)));
        else if (roll === 1) respond(message, { v: 1, requestId, seq: seq + 5, type: 'text-delta', text: 'out of order' });
        else if (roll === 2) respond(message, { v: 1, requestId: 'someone-else', seq: seq++, type: 'text-delta', text: 'not yours' });
        else if (roll === 3) respond(message, { v: 1, requestId, seq: seq++, type: 'mystery', payload: 42 });
        else if (roll === 4) respond(message, { v: 1, requestId, seq: seq++, type: 'tool-call', toolCallId: `call-${random.int(1e6)}`, name: 'chaos', args: { n: random.int(10) } });
        else if (roll === 5) respond(message, { v: 1, requestId, seq: seq++, type: 'usage', usage: { inputTokens: 'many' } });
        else if (roll === 6) respond(message, { v: 1, requestId, seq: seq++, type: 'error', error: { code: 'provider_error', message: 'chaos', retryable: random.chance(0.5) } });
        else respond(message, { v: 1, requestId, seq: seq++, type: 'text-delta', text: 'fine ' });
      }
      if (random.chance(0.6)) respond(message, { v: 1, requestId, seq: seq++, type: 'done', finishReason: 'stop' });
    },
  });
  const cancel = nc.subscribe('agentbus.provider.chaos.cancel', {
    callback: (_error, message) => {
      if (random.chance(0.5)) respond(message, randomBytes(8));
    },
  });

  const call = nc.subscribe('agentbus.tools.chaos.call', {
    queue: 'agentbus.tools.chaos',
    callback: (_error, message) => {
      let callId: unknown = 'unknown';
      try {
        callId = (codec.decode(message.data, message.headers?.get('Content-Type')) as { callId?: unknown }).callId;
      } catch {
        // As above.
      }
      const roll = random.int(6);
      if (roll === 0) return; // no reply: the tool's timeout must end the call
      if (roll === 1) respond(message, randomBytes(random.int(64)));
      else if (roll === 2) respond(message, { v: 1, callId: 'not-this-call', ok: true, output: 'misdirected' });
      else if (roll === 3) respond(message, { v: 1, callId, ok: false, error: { code: 'tool_failed' } });
      else if (roll === 4) respond(message, { v: 1, callId, ok: 'maybe' });
      else respond(message, { v: 1, callId, ok: true, output: 'chaos says hi' });
    },
  });
  const registration = createServiceRegistration(nc, {
    name: 'chaos-tools',
    version: '0.0.1',
    endpoints: [
      {
        name: 'chaos',
        subject: 'agentbus.tools.chaos.call',
        queueGroup: 'agentbus.tools.chaos',
        metadata: { description: 'answers with garbage', parameters: '{"type":"object"}', tier: 'read_only', timeoutMs: '1000', idempotent: 'true' },
      },
    ],
  });
  await nc.flush();
  return {
    repliesSent: () => sent,
    async stop() {
      await registration.stop();
      for (const subscription of [generate, cancel, call]) subscription.unsubscribe();
    },
  };
}
