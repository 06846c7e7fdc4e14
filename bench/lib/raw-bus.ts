import { nuid } from '@nats-io/nats-core';
import type { NatsConnection } from '@nats-io/nats-core';
import { RetentionPolicy, StorageType, jetstream, jetstreamManager } from '@nats-io/jetstream';
import { createToolClient } from '../../src/bus/tool-client.ts';
import { msgpackHeaders } from '../../src/bus/request.ts';
import type { Logger } from '../../src/logging.ts';
import { createCodec, createSubjects } from '../../src/protocol/index.ts';
import type { ToolCallRequest } from '../../src/protocol/index.ts';
import { summarize } from './stats.ts';
import type { Summary } from './stats.ts';
import { RECORDED_TOOL_NAME, TOOL_NAME } from './workload.ts';

/** Round trips measured in one interleaved loop, so they share the machine's conditions. */
export interface RoundTrips {
  /** The runtime's tool client calling `bench_lookup` on a worker process. */
  readonly toolCall: Summary;
  /** The same for `bench_record`, side-effecting: the worker writes the outcome to the result ledger before it replies. */
  readonly recordedToolCall: Summary;
  /** A core NATS request/reply to an echo responder in that same worker process, same payload. */
  readonly request: Summary;
  /** A JetStream publish to a file stream with `Nats-Msg-Id` and expected last subject sequence, as the log appends. */
  readonly append: Summary;
  /** A JetStream API request for a subject's last message, as opening a session and claiming its lease do. */
  readonly get: Summary;
}

/** Measures `iterations` of each kind, round-robin, after a warm-up. */
export async function measureRoundTrips(nc: NatsConnection, logger: Logger, iterations: number): Promise<RoundTrips> {
  const codec = createCodec();
  const subjects = createSubjects('agentbus');
  const tools = createToolClient({ nc, subjects, codec, logger });
  const jsm = await jetstreamManager(nc);
  const js = jetstream(nc);
  const stream = 'BENCH_RAW';
  await jsm.streams.add({ name: stream, subjects: ['bench.raw.>'], storage: StorageType.File, retention: RetentionPolicy.Limits, duplicate_window: 120_000_000_000, allow_direct: true });
  const lastSeq = new Map<string, number>();
  const samples = { toolCall: [] as number[], recordedToolCall: [] as number[], request: [] as number[], append: [] as number[], get: [] as number[] };
  const run = nuid.next();
  const toolRequest = (i: number, name = TOOL_NAME): ToolCallRequest => ({
    v: 1,
    callId: `c${i}`,
    effectId: `bench:${run}:${name}:${i}`,
    name,
    args: { key: 'alpha' },
    tenant: 'bench',
    sessionId: 'rt',
    turnId: 't',
    deadline: Date.now() + 10_000,
  });
  const echoPayload = codec.encode(toolRequest(0));
  const event = codec.encode({ v: 1, id: 'x', type: 'tool.result', tenant: 'bench', sessionId: 'rt', ts: Date.now(), data: { output: 'alpha=5' } });
  const round = async (i: number, record: boolean) => {
    const subject = `bench.raw.s${i % 64}`;
    let t = performance.now();
    const reply = await tools.call(toolRequest(i), { timeoutMs: 10_000 });
    if (!reply.ok) throw new Error(`tool call failed: ${JSON.stringify(reply.error)}`);
    if (record) samples.toolCall.push(performance.now() - t);
    t = performance.now();
    const recorded = await tools.call(toolRequest(i, RECORDED_TOOL_NAME), { timeoutMs: 10_000 });
    if (!recorded.ok) throw new Error(`recorded tool call failed: ${JSON.stringify(recorded.error)}`);
    if (record) samples.recordedToolCall.push(performance.now() - t);
    t = performance.now();
    await nc.request('bench.echo', echoPayload, { timeout: 10_000, headers: msgpackHeaders() });
    if (record) samples.request.push(performance.now() - t);
    t = performance.now();
    const ack = await js.publish(subject, event, { msgID: nuid.next(), expect: { lastSubjectSequence: lastSeq.get(subject) ?? 0 }, headers: msgpackHeaders() });
    if (record) samples.append.push(performance.now() - t);
    lastSeq.set(subject, ack.seq);
    t = performance.now();
    // A direct get of the subject's last message, as the runtime finds a session's last sequence.
    await nc.request(`$JS.API.DIRECT.GET.${stream}`, new TextEncoder().encode(JSON.stringify({ last_by_subj: subject })), { timeout: 10_000 });
    if (record) samples.get.push(performance.now() - t);
  };
  for (let i = 0; i < Math.min(200, iterations); i++) await round(i, false);
  for (let i = 0; i < iterations; i++) await round(i, true);
  await jsm.streams.delete(stream);
  return { toolCall: summarize(samples.toolCall), recordedToolCall: summarize(samples.recordedToolCall), request: summarize(samples.request), append: summarize(samples.append), get: summarize(samples.get) };
}
