import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { DiscardPolicy, RetentionPolicy, StorageType, jetstream, jetstreamManager } from '@nats-io/jetstream';
import { createSessionLog } from '../../src/bus/session-log.ts';
import { DEFAULT_STREAM_LIMITS, ensureStreams } from '../../src/bus/streams.ts';
import { createLogger } from '../../src/logging.ts';
import { createCodec, createEnvelopeFactory, createSubjects } from '../../src/protocol/index.ts';
import type { AgentEvent, LogEvent } from '../../src/protocol/index.ts';
import { mkdtemp, rm } from 'node:fs/promises';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { connect } from '@nats-io/transport-node';
import type { NatsConnection } from '@nats-io/nats-core';
import { startNatsServerProcess } from '../../src/nats-server.ts';
import type { NatsServerProcess } from '../../src/nats-server.ts';
import { openStateStore } from '../../services/memory/state-store.ts';
import { useNatsServer } from '../helpers/nats-fixture.ts';
import { collectEvents, requestJson, startStack } from '../helpers/stack.ts';
import type { TestStack } from '../helpers/stack.ts';

const codec = createCodec();
let counter = 0;
const envelopes = createEnvelopeFactory({ newId: () => `id-${++counter}`, now: () => 1000 });
const userMessage = (sessionId: string, text: string) => envelopes.create('user.message', { tenant: 'acme', sessionId, turnId: 't1' }, { text }) as LogEvent;

describe('the log and live streams', () => {
  const nats = useNatsServer();
  const warnings: Array<Record<string, unknown>> = [];
  const logger = createLogger({ name: 'test', level: 'warn', destination: { write: (line: string) => void warnings.push(JSON.parse(line) as Record<string, unknown>) } });

  it('carry their limits, as STREAM.INFO reads them back', async () => {
    const jsm = await jetstreamManager(nats.nc);
    const names = await ensureStreams(jsm, { prefix: 'agentbus' });
    const log = (await jsm.streams.info(names.log)).config;
    expect(log).toMatchObject({
      discard: DiscardPolicy.New,
      max_bytes: 10 * 1024 ** 3,
      max_msg_size: 1024 * 1024,
      max_msgs_per_subject: 100_000,
      discard_new_per_subject: true,
    });
    const live = (await jsm.streams.info(names.live)).config;
    expect(live).toMatchObject({ discard: DiscardPolicy.Old, max_bytes: 256 * 1024 * 1024, max_msg_size: 1024 * 1024, storage: StorageType.Memory });
  });

  it('updates a log stream made by an older version, keeping its events', async () => {
    const jsm = await jetstreamManager(nats.nc);
    // As versions before the limits made it: discard old, nothing bounded.
    await jsm.streams.add({ name: 'OLD_LOG', subjects: ['old.*.sessions.*.log'], retention: RetentionPolicy.Limits, storage: StorageType.File, discard: DiscardPolicy.Old, allow_direct: true });
    const log = createSessionLog({ nc: nats.nc, js: jetstream(nats.nc), subjects: createSubjects('old'), codec, stream: 'OLD_LOG' });
    await log.append(userMessage('s1', 'kept'), 0);
    await ensureStreams(jsm, { prefix: 'old', logger });
    const info = await jsm.streams.info('OLD_LOG');
    expect(info.config).toMatchObject({ discard: DiscardPolicy.New, max_bytes: DEFAULT_STREAM_LIMITS.logMaxBytes, max_msgs_per_subject: DEFAULT_STREAM_LIMITS.logMaxSessionEvents });
    expect(info.state.messages).toBe(1);
  });

  it('does not lower a limit the server would enforce by deleting events: the log keeps them, and says why at warn', async () => {
    const jsm = await jetstreamManager(nats.nc);
    await jsm.streams.add({ name: 'FULL_LOG', subjects: ['full.*.sessions.*.log'], retention: RetentionPolicy.Limits, storage: StorageType.File, discard: DiscardPolicy.Old, allow_direct: true });
    const log = createSessionLog({ nc: nats.nc, js: jetstream(nats.nc), subjects: createSubjects('full'), codec, stream: 'FULL_LOG' });
    let seq = 0;
    for (let index = 0; index < 5; index++) seq = await log.append(userMessage('long', `event ${index} ${'x'.repeat(1000)}`), seq);
    await ensureStreams(jsm, { prefix: 'full', logger, limits: { ...DEFAULT_STREAM_LIMITS, logMaxBytes: 2048, logMaxSessionEvents: 3 } });
    const info = await jsm.streams.info('FULL_LOG');
    expect(info.state.messages).toBe(5);
    expect(info.config).toMatchObject({ discard: DiscardPolicy.New, max_bytes: -1, max_msgs_per_subject: -1 });
    expect(warnings.map((line) => line.msg)).toEqual([
      expect.stringContaining('the log holds more than AGENTBUS_LOG_MAX_BYTES'),
      expect.stringContaining('a session log holds more events than AGENTBUS_LOG_MAX_SESSION_EVENTS'),
    ]);
  });

  it('refuses an append past the log bytes with quota_exceeded', async () => {
    const jsm = await jetstreamManager(nats.nc);
    const names = await ensureStreams(jsm, { prefix: 'small', limits: { ...DEFAULT_STREAM_LIMITS, logMaxBytes: 4096 } });
    const log = createSessionLog({ nc: nats.nc, js: jetstream(nats.nc), subjects: createSubjects('small'), codec, stream: names.log });
    const refusal = await (async () => {
      for (let index = 0; index < 10; index++) await log.append(userMessage(`s${index}`, 'x'.repeat(1000)), 0);
    })().catch((err: unknown) => err);
    expect(refusal).toMatchObject({ code: 'quota_exceeded', message: expect.stringMatching(/maximum bytes exceeded/) });
    expect((await jsm.streams.info(names.log)).state.bytes).toBeLessThanOrEqual(4096);
  });

  it('refuses the append past a session event count, loudly, and keeps the session history and other sessions whole', async () => {
    const jsm = await jetstreamManager(nats.nc);
    const names = await ensureStreams(jsm, { prefix: 'few', limits: { ...DEFAULT_STREAM_LIMITS, logMaxSessionEvents: 3 } });
    const log = createSessionLog({ nc: nats.nc, js: jetstream(nats.nc), subjects: createSubjects('few'), codec, stream: names.log });
    let seq = 0;
    for (let index = 0; index < 3; index++) seq = await log.append(userMessage('busy', `event ${index}`), seq);
    await expect(log.append(userMessage('busy', 'one too many'), seq)).rejects.toMatchObject({
      code: 'quota_exceeded',
      retryable: false,
      message: expect.stringMatching(/JetStream refused an append .*maximum messages per subject exceeded.*AGENTBUS_LOG_MAX_SESSION_EVENTS/),
    });
    expect((await log.read('acme', 'busy')).events.map((event) => event.type === 'user.message' && event.data.text)).toEqual(['event 0', 'event 1', 'event 2']);
    expect(await log.append(userMessage('quiet', 'fine'), 0)).toBeGreaterThan(0);
  });
});

describe('on a server with little room for JetStream (max_file_store 1 GiB)', () => {
  let server: NatsServerProcess;
  let storeDir: string;
  let nc: NatsConnection;
  const warnings: Array<Record<string, unknown>> = [];
  const logger = createLogger({ name: 'test', level: 'warn', destination: { write: (line: string) => void warnings.push(JSON.parse(line) as Record<string, unknown>) } });
  beforeAll(async () => {
    storeDir = await mkdtemp(join(tmpdir(), 'agentbus-nats-small-'));
    // The later jetstream block is the one the server reads: it names the store again.
    server = await startNatsServerProcess({ storeDir, config: `jetstream { store_dir: ${JSON.stringify(storeDir)}, max_file_store: 1GB }` });
    nc = await connect({ servers: server.url });
  });
  afterAll(async () => {
    await nc?.close();
    await server?.stop();
    await rm(storeDir, { recursive: true, force: true });
  });

  it('makes the default log and state limits fit what the server can reserve, says so at warn, and starts again alike', async () => {
    const jsm = await jetstreamManager(nc);
    const names = await ensureStreams(jsm, { prefix: 'agentbus', logger });
    // 10 GiB halved until it fits in 1 GiB.
    expect((await jsm.streams.info(names.log)).config.max_bytes).toBe(640 * 1024 * 1024);
    expect(warnings.some((line) => String(line.msg).includes('cannot reserve the default max_bytes of the stream AGENTBUS_LOG'))).toBe(true);
    await ensureStreams(jsm, { prefix: 'agentbus', logger });
    expect((await jsm.streams.info(names.log)).config.max_bytes).toBe(640 * 1024 * 1024);
    // The state bucket's 1 GiB default, in the 384 MiB left.
    const state = await openStateStore({ nc, codec, logger });
    expect((await jsm.streams.info('KV_AGENTBUS_STATE')).config.max_bytes).toBe(256 * 1024 * 1024);
    state.stop();
  });

  it('refuses a log limit the operator set that the server cannot reserve, naming the variable', async () => {
    const jsm = await jetstreamManager(nc);
    await expect(ensureStreams(jsm, { prefix: 'big', limits: { logMaxBytes: 5 * 1024 ** 3 } })).rejects.toThrow(
      /the NATS server cannot reserve 5368709120 bytes for the stream BIG_LOG \(AGENTBUS_LOG_MAX_BYTES\): lower AGENTBUS_LOG_MAX_BYTES/,
    );
  });
});

const turnEnded = (events: AgentEvent[]) => events.find((event) => event.type === 'turn.ended');

describe('an event past the log limit, on a running runtime', () => {
  let stack: TestStack;
  beforeAll(async () => {
    stack = await startStack({
      script: { responses: [{ text: `long answer ${'y'.repeat(8_000)}` }, { text: 'short answer' }] },
      runtime: { streamLimits: { ...DEFAULT_STREAM_LIMITS, maxEventBytes: 4096 } },
    });
  });
  afterAll(() => stack?.stop());

  it('refuses a prompt too large to log with an error reply, not a hang', async () => {
    const reply = await requestJson(stack.client, 'agentbus.acme.sessions.big-prompt.prompt', { text: 'z'.repeat(6_000) }, 15_000);
    expect(reply).toMatchObject({ accepted: false, error: { code: 'payload_too_large', retryable: false, message: expect.stringMatching(/message size exceeds maximum allowed.*AGENTBUS_LOG_MAX_EVENT_BYTES/) } });
  });

  it('ends a turn whose answer is too large to log as failed, and the session goes on', async () => {
    const watcher = collectEvents(stack.client, 'acme', 'big-answer');
    expect(await requestJson(stack.client, 'agentbus.acme.sessions.big-answer.prompt', { text: 'talk a lot' })).toMatchObject({ accepted: true });
    const events = await watcher.until((seen) => turnEnded(seen) !== undefined, 20_000);
    expect(turnEnded(events)).toMatchObject({ data: { reason: 'failed', error: { code: 'payload_too_large', message: expect.stringMatching(/message size exceeds maximum allowed/) } } });
    expect(await requestJson(stack.client, 'agentbus.acme.sessions.big-answer.prompt', { text: 'briefly' })).toMatchObject({ accepted: true });
    await watcher.until((seen) => seen.filter((event) => event.type === 'turn.ended').length >= 2, 20_000);
    expect(events.filter((event) => event.type === 'turn.ended').map((event) => event.type === 'turn.ended' && event.data.reason)).toEqual(['failed', 'yielded']);
    watcher.stop();
  });
});
