import { describe, expect, it } from 'vitest';
import { connect } from '@nats-io/transport-node';
import { watchConnectionHealth } from '../../src/bus/connection-health.ts';
import { useNatsServer } from '../helpers/nats-fixture.ts';
import { captureLogs } from '../helpers/captured-logs.ts';

const nats = useNatsServer();

describe('connection health', () => {
  it('is ready while its own subscription answers the probe', async () => {
    const nc = await connect({ servers: nats.server.url });
    const probeSubscription = nc.subscribe('health.self', { callback: (_error, message) => void message.respond() });
    const health = watchConnectionHealth({
      nc,
      logger: captureLogs().logger,
      intervalMs: 50,
      probe: async () => void (await nc.request('health.self', undefined, { timeout: 500 })),
      onUnrecoverable: () => expect.fail('a healthy connection was given up'),
    });
    await new Promise((resolve) => setTimeout(resolve, 300));
    expect(health.figures()).toMatchObject({ state: 'connected', ready: true, failedProbes: 0 });
    health.stop();
    probeSubscription.unsubscribe();
    await nc.close();
  });

  it('forces a reconnect when its subscription stops answering, then gives up and says why', async () => {
    const nc = await connect({ servers: nats.server.url, reconnectTimeWait: 50 });
    const logs = captureLogs();
    let answering = true;
    nc.subscribe('health.deaf', { callback: (_error, message) => void (answering && message.respond()) });
    const reasons: string[] = [];
    const health = watchConnectionHealth({
      nc,
      logger: logs.logger,
      intervalMs: 100,
      timeoutMs: 100,
      reconnectAfter: 2,
      giveUpAfter: 4,
      probe: async () => void (await nc.request('health.deaf', undefined, { timeout: 100 })),
      onUnrecoverable: (reason) => reasons.push(reason),
    });
    answering = false;
    await expect.poll(() => reasons.length, { timeout: 5_000 }).toBe(1);
    expect(reasons[0]).toMatch(/probes in a row got no answer/);
    expect(health.figures().ready).toBe(false);
    expect(health.figures().disconnects).toBeGreaterThanOrEqual(1);
    expect(logs.lines.some((line) => line.msg === 'own subscriptions do not answer; forcing a reconnect to subscribe anew')).toBe(true);
    health.stop();
    await nc.close();
  });
});
