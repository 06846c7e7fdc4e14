import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { connect } from '@nats-io/transport-node';
import type { NatsConnection } from '@nats-io/nats-core';
import { Objm } from '@nats-io/obj';
import { PassThrough } from 'node:stream';
import { main } from '../../cli/main.ts';
import { createMemoryClient } from '../../src/bus/memory-client.ts';
import { createCodec } from '../../src/protocol/index.ts';
import type { MemoryRebuildReply } from '../../src/protocol/index.ts';
import { resolveProviderConfig, startProviderService } from '../../services/provider/index.ts';
import type { ProviderService } from '../../services/provider/index.ts';
import { startRuntimeService } from '../../services/runtime/index.ts';
import type { Runtime } from '../../services/runtime/index.ts';
import { startNatsServer } from '../helpers/nats-server.ts';
import type { TestNatsServer } from '../helpers/nats-server.ts';
import { startServiceProcess } from '../helpers/service-process.ts';
import type { ServiceProcess } from '../helpers/service-process.ts';
import { collectEvents, requestJson, silentLogger } from '../helpers/stack.ts';

const codec = createCodec();
let nats: TestNatsServer;
let client: NatsConnection;
let provider: ProviderService;
let runtime: Runtime;
let memory: ServiceProcess | undefined;

const MEMORY_ENV = { AGENTBUS_EMBED_PROVIDER: 'none', AGENTBUS_MEMORY_SNAPSHOT_INTERVAL_MS: '200' };

/** The memory service as its own process, once caught up; with the figures of its "caught up" log line. */
async function startMemory(): Promise<{ process: ServiceProcess; caughtUp: { fromSnapshot: number; read: number; lastSeq: number; entries: number } }> {
  const started = startServiceProcess('services/memory/main.ts', { NATS_URL: nats.url, ...MEMORY_ENV });
  await started.waitFor('memory caught up with the log', 30_000);
  const line = started
    .output()
    .split('\n')
    .find((candidate) => candidate.includes('memory caught up with the log'))!;
  return { process: started, caughtUp: JSON.parse(line) };
}

/** One turn with the scripted provider, which echoes the prompt once its script has played out. */
async function turn(tenant: string, sessionId: string, text: string): Promise<void> {
  const watcher = collectEvents(client, tenant, sessionId);
  const reply = await requestJson(client, `agentbus.${tenant}.sessions.${sessionId}.prompt`, { text }, 10_000);
  expect(reply.accepted).toBe(true);
  await watcher.until((seen) => seen.some((event) => event.type === 'turn.ended'), 20_000);
  watcher.stop();
}

/** Runs an agentbus CLI command in this process; resolves with its exit code and output. */
async function cli(argv: string[]): Promise<{ code: number; stdout: string; stderr: string }> {
  const stdout = new PassThrough();
  const stderr = new PassThrough();
  let out = '';
  let err = '';
  stdout.on('data', (chunk: Buffer) => (out += chunk.toString()));
  stderr.on('data', (chunk: Buffer) => (err += chunk.toString()));
  const code = await main(argv, { stdout, stderr, env: {}, cwd: process.cwd(), stateDir: '/nonexistent/.agentbus', signal: new AbortController().signal });
  return { code, stdout: out, stderr: err };
}

beforeAll(async () => {
  nats = await startNatsServer();
  client = await connect({ servers: nats.url });
  provider = await startProviderService({ nc: await connect({ servers: nats.url }), logger: silentLogger(), config: resolveProviderConfig({}), script: { responses: [] } });
  runtime = await startRuntimeService({ nc: await connect({ servers: nats.url }), logger: silentLogger(), config: { defaultModel: 'scripted:default', leaseTtlMs: 3_000 } });
}, 60_000);

afterAll(async () => {
  await memory?.stop('SIGKILL');
  await runtime?.stop().catch(() => undefined);
  await provider?.stop().catch(() => undefined);
  await client?.close();
  await nats?.stop();
});

describe('memory snapshots and rebuild', () => {
  it('starts from its snapshot after a crash, reading only the log that came after it', async () => {
    for (let index = 0; index < 4; index++) await turn('acme', `before-${index}`, `The password hint number ${index} is lighthouse-${index}.`);
    const first = await startMemory();
    memory = first.process;
    expect(first.caughtUp.fromSnapshot).toBe(0);
    const readFirst = first.caughtUp.read;
    expect(readFirst).toBeGreaterThan(8);
    await memory.waitFor('memory snapshot written', 10_000);
    const memoryClient = createMemoryClient({ nc: client, codec });
    const before = await memoryClient.search('acme', { query: 'lighthouse', k: 20 });
    expect(before.hits.length).toBeGreaterThanOrEqual(4);

    // The snapshot is in the object store, and names the log sequence it covers.
    const info = await (await new Objm(client).open('AGENTBUS_MEMORY')).info('index');
    expect(Number(info?.metadata?.['seq'])).toBeGreaterThanOrEqual(first.caughtUp.lastSeq);

    // A crash, and a turn while memory is down.
    await memory.stop('SIGKILL');
    await turn('acme', 'while-down', 'The harbour is called Saltmarsh.');
    const second = await startMemory();
    memory = second.process;
    expect(second.caughtUp.fromSnapshot).toBeGreaterThanOrEqual(first.caughtUp.lastSeq);
    // It read the turn it missed, not the log from its start.
    expect(second.caughtUp.read).toBeGreaterThan(0);
    expect(second.caughtUp.read).toBeLessThan(readFirst);

    const after = await memoryClient.search('acme', { query: 'lighthouse', k: 20 });
    expect(after.hits.map((hit) => [hit.sessionId, hit.seq, hit.text])).toEqual(before.hits.map((hit) => [hit.sessionId, hit.seq, hit.text]));
    expect((await memoryClient.search('acme', { query: 'Saltmarsh' })).hits.map((hit) => hit.sessionId)).toContain('while-down');
    // Counted once each, though the restart may read an event the snapshot already held.
    const sessions = (await memoryClient.listSessions('acme', { limit: 50 })).sessions;
    expect(sessions.map((session) => [session.sessionId, session.turns])).toEqual([
      ['before-0', 1],
      ['before-1', 1],
      ['before-2', 1],
      ['before-3', 1],
      ['while-down', 1],
    ]);
  }, 90_000);

  it('rebuilds its index from the log on agentbus.memory.rebuild, answering the same afterwards', async () => {
    const memoryClient = createMemoryClient({ nc: client, codec });
    const before = await memoryClient.search('acme', { query: 'lighthouse Saltmarsh', k: 20 });
    const reply = await client.request('agentbus.memory.rebuild', new Uint8Array(), { timeout: 30_000 });
    const rebuilt = codec.decode(reply.data) as MemoryRebuildReply;
    expect(rebuilt.entries).toBeGreaterThan(0);
    expect(rebuilt.lastSeq).toBeGreaterThan(0);
    await memory!.waitFor('memory index rebuilt from the log');
    const after = await memoryClient.search('acme', { query: 'lighthouse Saltmarsh', k: 20 });
    expect(after.hits.map((hit) => [hit.sessionId, hit.seq, hit.text])).toEqual(before.hits.map((hit) => [hit.sessionId, hit.seq, hit.text]));
    expect(after.mode).toBe('full-text');
    expect(after.note).toContain('AGENTBUS_EMBED_PROVIDER is none');

    // The same through the CLI: it finds the one instance through $SRV and waits for its answer.
    const run = await cli(['memory', 'rebuild', '--nats', nats.url, '--json']);
    expect(run.code).toBe(0);
    expect(JSON.parse(run.stdout.trim())).toMatchObject({ instance: expect.any(String), entries: rebuilt.entries, lastSeq: rebuilt.lastSeq });
    expect(run.stderr).toContain('rebuilding the index of 1 memory instance(s)');
    expect((await cli(['memory', 'frobnicate', '--nats', nats.url])).code).toBe(2);
    expect((await cli(['memory', 'rebuild', '--timeout', '-1', '--nats', nats.url])).code).toBe(2);
  }, 60_000);

  it('ignores a snapshot of another log (the stream was made anew) and reads the log from its start', async () => {
    const objects = await new Objm(client).open('AGENTBUS_MEMORY');
    // The rebuild above writes a new snapshot as it answers: killed in the middle of that write, memory may
    // leave none, so wait until the last rebuild's snapshot is written.
    const afterLastRebuild = () => memory!.output().slice(memory!.output().lastIndexOf('rebuilding the memory index'));
    await expect.poll(() => afterLastRebuild().includes('memory snapshot written'), { timeout: 10_000 }).toBe(true);
    expect(await objects.getBlob('index')).not.toBeNull();
    await memory!.stop('SIGKILL');
    memory = undefined;
    const info = await objects.info('index');
    const snapshot = codec.decode((await objects.getBlob('index'))!) as Record<string, unknown>;
    await objects.putBlob({ name: 'index', metadata: { ...info!.metadata, seq: String(Number(info!.metadata!['seq']) + 1) } }, codec.encode({ ...snapshot, seq: Number(snapshot['seq']) + 1, logCreated: '2001-01-01T00:00:00Z' }));
    const restarted = await startMemory();
    memory = restarted.process;
    expect(restarted.caughtUp.fromSnapshot).toBe(0);
    expect(restarted.process.output()).toContain('the memory snapshot is of another session log');
    expect((await createMemoryClient({ nc: client, codec }).search('acme', { query: 'Saltmarsh' })).hits.length).toBeGreaterThan(0);
  }, 60_000);

  it('forgets a session deleted while it was down, though its snapshot still holds it', async () => {
    await memory!.waitFor('memory snapshot written', 10_000);
    await memory!.stop('SIGKILL');
    memory = undefined;
    const deleted = await requestJson(client, 'agentbus.acme.sessions.before-1.delete', {}, 10_000);
    // session.created, user.message, turn.started, assistant.message, turn.ended
    expect(deleted).toMatchObject({ ok: true, purged: 5 });
    const restarted = await startMemory();
    memory = restarted.process;
    expect(restarted.caughtUp.fromSnapshot).toBeGreaterThan(0);
    const memoryClient = createMemoryClient({ nc: client, codec });
    expect((await memoryClient.listSessions('acme', { limit: 50 })).sessions.map((session) => session.sessionId)).toEqual(['before-0', 'before-2', 'before-3', 'while-down']);
    expect((await memoryClient.search('acme', { query: 'lighthouse-1 lighthouse', k: 20 })).hits.map((hit) => hit.sessionId)).not.toContain('before-1');
  }, 60_000);
});
