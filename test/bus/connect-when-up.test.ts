import { mkdtemp, rm } from 'node:fs/promises';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { afterEach, describe, expect, it } from 'vitest';
import { connect } from '@nats-io/transport-node';
import { freePort, startNatsServerProcess } from '../../src/nats-server.ts';
import type { NatsServerProcess } from '../../src/nats-server.ts';
import { busStartingWaitMs, connectWhenUp } from '../../src/service/connect-when-up.ts';

// `agentbus ask` starts its services beside the embedded nats-server: a service may try to connect before the server
// listens, and must then wait for it (within AGENTBUS_BUS_STARTING_MS) rather than fail.

const cleanup: Array<() => Promise<void>> = [];
afterEach(async () => {
  for (const step of cleanup.splice(0).reverse()) await step();
});

async function serverLater(port: number, delayMs: number): Promise<NatsServerProcess> {
  const dir = await mkdtemp(join(tmpdir(), 'agentbus-bus-starting-'));
  cleanup.push(() => rm(dir, { recursive: true, force: true }));
  await new Promise((resolve) => setTimeout(resolve, delayMs));
  const server = await startNatsServerProcess({ storeDir: dir, port });
  cleanup.push(() => server.stop());
  return server;
}

describe('a first connect while the bus is starting', () => {
  it('waits for a server that starts listening later, and connects', async () => {
    const port = await freePort();
    const started = performance.now();
    const server = serverLater(port, 400);
    const nc = await connectWhenUp(() => connect({ servers: `nats://127.0.0.1:${port}` }), { waitMs: 15_000 });
    cleanup.push(() => nc.close());
    await server;
    expect(performance.now() - started).toBeGreaterThanOrEqual(400);
    await nc.flush();
  });

  it('fails at once when it may not wait, and after the wait when nothing listens', async () => {
    const port = await freePort();
    await expect(connectWhenUp(() => connect({ servers: `nats://127.0.0.1:${port}` }), { waitMs: 0 })).rejects.toThrow(/refused/);
    const started = performance.now();
    await expect(connectWhenUp(() => connect({ servers: `nats://127.0.0.1:${port}` }), { waitMs: 300 })).rejects.toThrow(/refused/);
    expect(performance.now() - started).toBeGreaterThanOrEqual(250);
  });

  it('does not retry an error other than a refusal', async () => {
    let tries = 0;
    const failing = () => {
      tries += 1;
      return Promise.reject(new Error('authorization violation'));
    };
    await expect(connectWhenUp(failing, { waitMs: 5_000 })).rejects.toThrow('authorization violation');
    expect(tries).toBe(1);
  });

  it('reads its wait from AGENTBUS_BUS_STARTING_MS', () => {
    expect(busStartingWaitMs({})).toBe(0);
    expect(busStartingWaitMs({ AGENTBUS_BUS_STARTING_MS: '15000' })).toBe(15_000);
    expect(busStartingWaitMs({ AGENTBUS_BUS_STARTING_MS: 'soon' })).toBe(0);
    expect(busStartingWaitMs({ AGENTBUS_BUS_STARTING_MS: '999999' })).toBe(60_000);
  });
});
