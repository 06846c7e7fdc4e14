import { describe, expect, it } from 'vitest';
import { createInbox } from '@nats-io/nats-core';
import { msgpackHeaders } from '../../src/bus/request.ts';
import { ProviderError } from '../../src/errors.ts';
import { createCodec, createSubjects } from '../../src/protocol/index.ts';
import type { ChunkBody } from '../../src/protocol/index.ts';
import type { ProviderAdapter } from '../../services/provider/adapter.ts';
import { PROVIDER_SERVICE_NAME, createProviderHost, createScriptedAdapter } from '../../services/provider/index.ts';
import { withResilience } from '../../services/provider/resilience.ts';
import { silentLogger } from '../helpers/stack.ts';
import { useNatsServer } from '../helpers/nats-fixture.ts';

// Providers announce themselves on $SRV (service agentbus-provider): one endpoint per provider, with its
// request stats and, in the stats' data, the state of its circuit breaker (the dashboard's workers view),
// and one `<provider>-embed` endpoint for its embeddings.

const codec = createCodec();
const subjects = createSubjects('discoverytest');
const nats = useNatsServer();

/** One `$SRV.STATS.agentbus-provider` answer, as JSON. */
async function providerStats(): Promise<{ endpoints: Array<{ name: string; num_requests: number; num_errors: number; data?: { circuit?: string } }> }> {
  const reply = await nats.nc.request(`$SRV.STATS.${PROVIDER_SERVICE_NAME}`, new Uint8Array(), { timeout: 2000 });
  return codec.decode(reply.data, 'application/json') as Awaited<ReturnType<typeof providerStats>>;
}

/** Sends one generate request and waits for its terminal chunk. */
async function generate(provider: string): Promise<string> {
  const inbox = createInbox();
  const subscription = nats.nc.subscribe(inbox, { max: 20 });
  const request = { v: 1, requestId: `r-${Math.random().toString(36).slice(2)}`, model: `${provider}:m`, messages: [{ role: 'user', content: 'hi' }], tools: [] };
  nats.nc.publish(subjects.providerGenerate(provider), codec.encode(request), { reply: inbox, headers: msgpackHeaders() });
  for await (const message of subscription) {
    const chunk = codec.decode(message.data) as { type: string };
    if (chunk.type === 'done' || chunk.type === 'error') {
      subscription.unsubscribe();
      return chunk.type;
    }
  }
  return 'none';
}

describe('provider discovery on $SRV', () => {
  it('announces each provider with its request stats and its circuit state, open after failures', async () => {
    const failing: ProviderAdapter = {
      name: 'flaky',
      async *generate(): AsyncGenerator<ChunkBody> {
        throw new ProviderError('provider_error', 'upstream is down', { retryable: true, status: 503 });
      },
    };
    const flaky = withResilience(failing, { retry: { maxAttempts: 1 }, circuitBreaker: { failureThreshold: 2, resetTimeoutMs: 60_000 } });
    const host = createProviderHost({ nc: nats.nc, subjects, codec, logger: silentLogger(), adapters: [flaky, createScriptedAdapter({ script: { responses: [{ text: 'ok' }] } })] });
    await host.start();
    try {
      const info = codec.decode((await nats.nc.request(`$SRV.INFO.${PROVIDER_SERVICE_NAME}`, new Uint8Array(), { timeout: 2000 })).data, 'application/json') as { endpoints: Array<{ name: string; subject: string }> };
      expect(info.endpoints).toEqual([
        expect.objectContaining({ name: 'flaky', subject: 'discoverytest.provider.flaky.generate' }),
        expect.objectContaining({ name: 'flaky-embed', subject: 'discoverytest.provider.flaky.embed' }),
        expect.objectContaining({ name: 'scripted', subject: 'discoverytest.provider.scripted.generate' }),
        expect.objectContaining({ name: 'scripted-embed', subject: 'discoverytest.provider.scripted.embed' }),
      ]);
      expect((await providerStats()).endpoints.find((endpoint) => endpoint.name === 'flaky')).toMatchObject({ num_requests: 0, data: { circuit: 'closed' } });

      expect(await generate('flaky')).toBe('error');
      expect(await generate('flaky')).toBe('error');
      expect(await generate('scripted')).toBe('done');
      await expect.poll(async () => (await providerStats()).endpoints.find((endpoint) => endpoint.name === 'flaky')).toMatchObject({ num_requests: 2, num_errors: 2, data: { circuit: 'open' } });
      const scripted = (await providerStats()).endpoints.find((endpoint) => endpoint.name === 'scripted')!;
      // The scripted provider has no breaker, so it says nothing about one.
      expect(scripted).toMatchObject({ num_requests: 1, num_errors: 0 });
      expect(scripted.data).toBeUndefined();
    } finally {
      await host.stop();
    }
    await expect(nats.nc.request(`$SRV.PING.${PROVIDER_SERVICE_NAME}`, new Uint8Array(), { timeout: 500 })).rejects.toThrow();
  });
});
