import { mkdtemp, rm, writeFile } from 'node:fs/promises';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { afterAll, afterEach, beforeAll, describe, expect, it } from 'vitest';
import { connect } from '@nats-io/transport-node';
import type { NatsConnection } from '@nats-io/nats-core';
import type { AgentEvent } from '../../src/protocol/index.ts';
import { startNatsServer } from '../helpers/nats-server.ts';
import type { TestNatsServer } from '../helpers/nats-server.ts';
import { startServiceProcess } from '../helpers/service-process.ts';
import type { ServiceProcess } from '../helpers/service-process.ts';
import { collectEvents, requestJson } from '../helpers/stack.ts';

// A provider that starts late, restarts, or never comes: the runtime waits for it (AGENTBUS_WAIT_FOR_SERVICE_MS)
// instead of failing the turn at once. Every service here is its own process on a real nats-server, and the
// provider is SIGKILLed as a crash would end it.

const TENANT = 'waits';
// Slow enough that a kill lands mid-stream: 40 chunks, 100 ms apart.
const SLOW_TEXT = 'The provider streams this answer slowly, a few characters at a time, so that it can be killed midway through.';
let server: TestNatsServer;
let client: NatsConnection;
let dir: string;
let scriptFile: string;
const started: ServiceProcess[] = [];

function startProvider(): ServiceProcess {
  const provider = startServiceProcess('services/provider/main.ts', { NATS_URL: server.url, AGENTBUS_SCRIPT: scriptFile });
  started.push(provider);
  return provider;
}

function startRuntime(env: Record<string, string> = {}): ServiceProcess {
  const runtime = startServiceProcess('services/runtime/main.ts', { NATS_URL: server.url, AGENTBUS_LEASE_TTL_MS: '1500', ...env });
  started.push(runtime);
  return runtime;
}

async function prompt(sessionId: string, text: string): Promise<void> {
  expect(await requestJson(client, `agentbus.${TENANT}.sessions.${sessionId}.prompt`, { text }, 10_000)).toMatchObject({ accepted: true });
}

const ofType = (events: readonly AgentEvent[], type: string) => events.filter((event) => event.type === type);
const ends = (events: readonly AgentEvent[]) => ofType(events, 'turn.ended') as Array<Extract<AgentEvent, { type: 'turn.ended' }>>;
const retries = (events: readonly AgentEvent[]) => ofType(events, 'retry') as Array<Extract<AgentEvent, { type: 'retry' }>>;
const sleep = (ms: number) => new Promise((resolve) => setTimeout(resolve, ms));

beforeAll(async () => {
  dir = await mkdtemp(join(tmpdir(), 'agentbus-waits-'));
  scriptFile = join(dir, 'script.json');
  await writeFile(scriptFile, JSON.stringify({ responses: [{ text: SLOW_TEXT, delayMs: 100, chunkSize: 3 }] }));
  server = await startNatsServer();
  client = await connect({ servers: server.url });
});

afterEach(async () => {
  for (const process of started.splice(0)) await process.stop('SIGKILL');
});

afterAll(async () => {
  await client?.close();
  await server?.stop();
  await rm(dir, { recursive: true, force: true });
});

describe('a provider that is not there (yet)', () => {
  it('fails the turn once after AGENTBUS_WAIT_FOR_SERVICE_MS when no provider ever appears, naming the provider', async () => {
    await startRuntime({ AGENTBUS_WAIT_FOR_SERVICE_MS: '1500' }).waitFor('runtime started');
    const watcher = collectEvents(client, TENANT, 'never');
    const began = Date.now();
    await prompt('never', 'is anyone there?');
    await watcher.until((events) => ends(events).length >= 1, 20_000);
    const tookMs = Date.now() - began;
    // A second end would come right behind the first.
    await sleep(1000);
    watcher.stop();
    expect(ends(watcher.events)).toHaveLength(1);
    const [end] = ends(watcher.events);
    expect(end!.data).toMatchObject({ reason: 'failed', error: { code: 'no_responders', retryable: false } });
    expect(end!.data.error?.message).toContain('"scripted"');
    expect(end!.data.error?.message).toContain('waited 1500 ms');
    // 250 + 500 + 750 ms: three waits, each a retry event, within the bound.
    expect(retries(watcher.events).map((event) => event.data)).toEqual([
      expect.objectContaining({ attempt: 2, maxAttempts: 4, delayMs: 250, model: 'scripted:default', error: expect.objectContaining({ code: 'no_responders' }) }),
      expect.objectContaining({ attempt: 3, maxAttempts: 4, delayMs: 500 }),
      expect.objectContaining({ attempt: 4, maxAttempts: 4, delayMs: 750 }),
    ]);
    expect(tookMs).toBeGreaterThanOrEqual(1500);
  }, 60_000);

  it('ends the wait at once when the turn is cancelled', async () => {
    await startRuntime().waitFor('runtime started');
    const watcher = collectEvents(client, TENANT, 'cancel-wait');
    await prompt('cancel-wait', 'wait for me');
    await watcher.until((events) => retries(events).length >= 1, 20_000);
    const cancelled = Date.now();
    expect(await requestJson(client, `agentbus.${TENANT}.sessions.cancel-wait.cancel`, {}, 10_000)).toMatchObject({ ok: true });
    await watcher.until((events) => ends(events).length >= 1, 10_000);
    watcher.stop();
    expect(ends(watcher.events)).toHaveLength(1);
    expect(ends(watcher.events)[0]!.data.reason).toBe('cancelled');
    // Far below the 30 s the wait would have lasted.
    expect(Date.now() - cancelled).toBeLessThan(5000);
  }, 60_000);

  it('yields a turn prompted 1.5 s before any provider runs, once one appears', async () => {
    await startRuntime().waitFor('runtime started');
    const watcher = collectEvents(client, TENANT, 'late');
    await prompt('late', 'hello early');
    await sleep(1500);
    await startProvider().waitFor('provider service started');
    await watcher.until((events) => ends(events).length >= 1, 30_000);
    watcher.stop();
    expect(ends(watcher.events)).toHaveLength(1);
    expect(ends(watcher.events)[0]!.data).toMatchObject({ reason: 'yielded', text: SLOW_TEXT });
    expect(retries(watcher.events).length).toBeGreaterThanOrEqual(1);
    for (const retry of retries(watcher.events)) expect(retry.data).toMatchObject({ model: 'scripted:default', error: { code: 'no_responders' } });
  }, 60_000);

  it('waits when no model of a fallback chain has a provider, then answers on the primary once it is back', async () => {
    await startRuntime().waitFor('runtime started');
    const watcher = collectEvents(client, TENANT, 'chain');
    expect(
      await requestJson(client, `agentbus.${TENANT}.sessions.chain.prompt`, { text: 'hello chain', model: 'scripted:default', models: ['nowhere:model'] }, 10_000),
    ).toMatchObject({ accepted: true });
    await sleep(1500);
    await startProvider().waitFor('provider service started');
    await watcher.until((events) => ends(events).length >= 1, 30_000);
    watcher.stop();
    expect(ends(watcher.events)[0]!.data).toMatchObject({ reason: 'yielded', text: SLOW_TEXT });
    const messages = ofType(watcher.events, 'assistant.message') as Array<Extract<AgentEvent, { type: 'assistant.message' }>>;
    expect(messages.map((event) => event.data.model)).toEqual(['scripted:default']);
    // Each round moves to the fallback at once, then waits on the chain's last model.
    const seen = retries(watcher.events).map((event) => event.data);
    expect(seen).toContainEqual(expect.objectContaining({ model: 'scripted:default', nextModel: 'nowhere:model', delayMs: 0 }));
    expect(seen).toContainEqual(expect.objectContaining({ model: 'nowhere:model', attempt: 2, delayMs: 250, error: expect.objectContaining({ code: 'no_responders' }) }));
    expect(seen.some((data) => data.nextModel === undefined && data.model === 'scripted:default')).toBe(false);
  }, 60_000);

  it('finishes the turn in flight and the next one when the provider is SIGKILLed mid-stream and started again', async () => {
    await startRuntime().waitFor('runtime started');
    const provider = startProvider();
    await provider.waitFor('provider service started');
    const watcher = collectEvents(client, TENANT, 'killed');
    await prompt('killed', 'stream to me');
    await watcher.until((events) => ofType(events, 'assistant.delta').length >= 3, 20_000);
    await provider.stop('SIGKILL');
    const replacement = startProvider();
    await replacement.waitFor('provider service started');
    await watcher.until((events) => ends(events).length >= 1, 40_000);
    expect(ends(watcher.events)[0]!.data).toMatchObject({ reason: 'yielded', text: SLOW_TEXT });
    // The broken stream is a retry event; what a client was shown before the last retry is to be dropped, and the
    // deltas after it are the answer whole, once.
    const events = watcher.events;
    const lastRetry = events.findLastIndex((event) => event.type === 'retry');
    expect(retries(events).some((event) => event.data.error.code === 'stream_interrupted')).toBe(true);
    const after = events.slice(lastRetry + 1).filter((event) => event.type === 'assistant.delta') as Array<Extract<AgentEvent, { type: 'assistant.delta' }>>;
    expect(after.map((event) => event.data.text).join('')).toBe(SLOW_TEXT);
    const messages = ofType(events, 'assistant.message') as Array<Extract<AgentEvent, { type: 'assistant.message' }>>;
    expect(messages.map((event) => event.data.text)).toEqual([SLOW_TEXT]);

    await prompt('killed', 'and again');
    await watcher.until((seen) => ends(seen).length >= 2, 30_000);
    await sleep(500);
    watcher.stop();
    expect(ends(watcher.events).map((event) => event.data.reason)).toEqual(['yielded', 'yielded']);
  }, 90_000);
});
