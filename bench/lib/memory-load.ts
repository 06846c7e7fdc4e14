import { jetstream } from '@nats-io/jetstream';
import { stopwords as englishStopwords } from '@orama/stopwords/english';
import type { NatsConnection } from '@nats-io/nats-core';
import { createMemoryClient } from '../../src/bus/memory-client.ts';
import { createSessionLog } from '../../src/bus/session-log.ts';
import { createCodec, createSubjects, LogEventType, streamNames } from '../../src/protocol/index.ts';
import type { LogEvent } from '../../src/protocol/index.ts';
import { startServiceProcess } from '../../test/helpers/service-process.ts';
import type { ServiceProcess } from '../../test/helpers/service-process.ts';
import { summarize } from './stats.ts';
import type { Summary } from './stats.ts';

/** Search latency at one index size. */
export interface MemorySearchFigure {
  readonly indexed: number;
  readonly mode: 'full-text' | 'hybrid';
  readonly latencyMs: Summary;
}

/** What `npm run bench` reports of memory. */
export interface MemoryFigure {
  /** Events/s the session log took, appended as the runtime appends (pipelined, one writer per session). */
  readonly appendPerSecond: number;
  /** Events/s memory indexed (full text) while catching up with a log it had not read (every event of it, on memory's clock). */
  readonly indexPerSecond: number;
  /** Chunks/s that got their vectors from the scripted provider's embedder, after the full-text index. */
  readonly embedPerSecond: number | undefined;
  /**
   * While memory follows a log being appended (already caught up, the process warm): events/s from the first append
   * of a stretch until memory indexed its last event (full text), and until every chunk of it had its vector.
   */
  readonly follow?: { readonly events: number; readonly indexPerSecond: number; readonly embeddedPerSecond: number };
  readonly searches: readonly MemorySearchFigure[];
  /** The memory process's heap once everything was indexed, in bytes. */
  readonly heapBytes: number | undefined;
}

/**
 * Text with the shape of real messages: words drawn from a 5,000-word vocabulary by Zipf's law (a few words in
 * most messages, most words in few), so that a query's terms match a realistic share of them. As in English,
 * the commonest words are the stop words. Deterministic.
 */
const VOCABULARY = Array.from({ length: 5_000 }, (_, rank) => {
  if (rank < englishStopwords.length) return englishStopwords[rank]!;
  const letters = 'etaoinshrdlucmfwypvbgkjqxz';
  let word = '';
  for (let value = rank * 7_919 + 13; word.length < 3 + (rank % 6); value = Math.floor(value / 7) + rank) word += letters[value % letters.length];
  return `${word}${rank}`;
});
const ZIPF = (() => {
  const weights = VOCABULARY.map((_, rank) => 1 / (rank + 1));
  const total = weights.reduce((sum, weight) => sum + weight, 0);
  let running = 0;
  return weights.map((weight) => (running += weight / total));
})();
function zipfWord(random: number): string {
  let low = 0;
  let high = ZIPF.length - 1;
  while (low < high) {
    const middle = (low + high) >>> 1;
    if (ZIPF[middle]! < random) low = middle + 1;
    else high = middle;
  }
  return VOCABULARY[low]!;
}
/** A deterministic number in [0, 1) of two integers. */
function unit(index: number, salt: number): number {
  const x = Math.sin(index * 12.9898 + salt * 78.233) * 43_758.5453;
  return x - Math.floor(x);
}
/** Message `index`: 8 to 23 words. */
function sentence(index: number): string {
  const length = 8 + (index % 16);
  return Array.from({ length }, (_, at) => zipfWord(unit(index, at))).join(' ');
}
/** A query: two words of the vocabulary, drawn the same way. */
function query(index: number): string {
  return `${zipfWord(unit(index, 101))} ${zipfWord(unit(index, 202))}`;
}

/**
 * Appends `count` events to the log, as 10-event sessions of the tenant `bench-memory`, through the runtime's own
 * session log (pipelined appends with an expected sequence per session); resolves with events/s.
 */
async function fillLog(nc: NatsConnection, from: number, count: number): Promise<number> {
  const codec = createCodec();
  const subjects = createSubjects('agentbus');
  const log = createSessionLog({ nc, js: jetstream(nc), subjects, codec, stream: streamNames('agentbus').log });
  const perSession = 10;
  const sessions = Math.ceil(count / perSession);
  const started = performance.now();
  let next = 0;
  const worker = async () => {
    while (next < sessions) {
      const session = next++;
      const sessionId = `m${from + session * perSession}`;
      const events: LogEvent[] = Array.from({ length: Math.min(perSession, count - session * perSession) }, (_, offset) => {
        const index = from + session * perSession + offset;
        const type = offset % 2 === 0 ? LogEventType.userMessage : LogEventType.assistantMessage;
        const data =
          type === LogEventType.userMessage
            ? { text: sentence(index) }
            : { text: sentence(index), toolCalls: [], usage: { inputTokens: 40, outputTokens: 20 }, cost: 0, model: 'scripted:default', finishReason: 'stop' };
        return { v: 1, id: `bm${index}`, type, tenant: 'bench-memory', sessionId, turnId: 't', ts: Date.now(), seq: 0, data } as unknown as LogEvent;
      });
      await log.appendGroup(events, 0, () => undefined);
    }
  };
  await Promise.all(Array.from({ length: 32 }, worker));
  return count / ((performance.now() - started) / 1000);
}

/** For ad-hoc runs: fills the log with `count` events. */
export const fillLogForDebug = (nc: NatsConnection, count: number) => fillLog(nc, 0, count);
export const fillLogFromForDebug = (nc: NatsConnection, from: number, count: number) => fillLog(nc, from, count);

async function searchLatency(nc: NatsConnection, searches: number): Promise<{ latencyMs: Summary; mode: 'full-text' | 'hybrid' }> {
  const memory = createMemoryClient({ nc, codec: createCodec() });
  const times: number[] = [];
  let mode: 'full-text' | 'hybrid' = 'full-text';
  for (let i = 0; i < searches; i++) {
    const text = query(i);
    const t0 = performance.now();
    const reply = await memory.search('bench-memory', { query: text, k: 5 }, { timeoutMs: 30_000 });
    times.push(performance.now() - t0);
    mode = reply.mode;
  }
  return { latencyMs: summarize(times), mode };
}

/** The memory process's `$SRV.STATS` data: what it has indexed and embedded. */
export async function memoryStats(nc: NatsConnection): Promise<MemoryStats> {
  const reply = await nc.request('$SRV.STATS.agentbus-memory', new Uint8Array(), { timeout: 10_000 });
  const stats = JSON.parse(new TextDecoder().decode(reply.data)) as { data?: Record<string, unknown> };
  return stats.data as unknown as MemoryStats;
}

/** What the memory process says of itself in `$SRV.STATS` (see services/memory/index.ts). */
export interface MemoryStats {
  readonly entries: number;
  readonly vectors: number;
  readonly pendingVectors: number;
  /** Embedded, handed to the vector thread, not yet in its graph (absent before the thread). */
  readonly queuedVectors?: number;
  readonly lastSeq: number;
  /** Log events read since it started. */
  readonly indexed: number;
  /** The log read at start: events, and ms from following it to caught up (its own clock, without the process's start). */
  readonly catchUp?: { readonly events: number; readonly ms: number };
  readonly heapUsed?: number;
}

/** Every chunk embedded and its vector in the graph (searchable by vectors). */
function vectorsDone(stats: MemoryStats): boolean {
  return stats.pendingVectors === 0 && (stats.queuedVectors ?? 0) === 0;
}

async function until(check: () => Promise<boolean>, timeoutMs: number, what: string): Promise<void> {
  const deadline = Date.now() + timeoutMs;
  while (!(await check())) {
    if (Date.now() > deadline) throw new Error(`memory bench: ${what} not within ${timeoutMs} ms`);
    await new Promise((resolve) => setTimeout(resolve, 100));
  }
}

/**
 * Memory at `sizes` indexed messages (e.g. 10,000 and 100,000): fills the log to the first size, starts the memory
 * service (embedding with the scripted provider, which must run), measures how fast it catches up and its search
 * latency, then appends up to the next size while memory follows, and measures again.
 */
export async function measureMemory(options: { nc: NatsConnection; url: string; sizes: readonly number[]; searches: number; log: (text: string) => void }): Promise<MemoryFigure> {
  const { nc, sizes } = options;
  let filled = 0;
  const appendRates: number[] = [];
  appendRates.push(await fillLog(nc, 0, sizes[0]!));
  filled = sizes[0]!;
  const lastSeq = async () => (await jetstream(nc).jetstreamManager()).streams.info(streamNames('agentbus').log).then((info) => info.state.last_seq);
  const target = await lastSeq();
  // Snapshots off: the figure is indexing, not writing snapshots.
  const memory: ServiceProcess = startServiceProcess('services/memory/main.ts', { NATS_URL: options.url, LOG_LEVEL: 'warn', AGENTBUS_EMBED_PROVIDER: 'scripted', AGENTBUS_MEMORY_SNAPSHOT_EVENTS: '0', AGENTBUS_MEMORY_QUERY_EMBED_TIMEOUT_MS: '2000' });
  try {
    const started = performance.now();
    await until(async () => (await memoryStats(nc).catch(() => undefined))?.lastSeq === target, 600_000, 'catching up with the log');
    const wallSeconds = (performance.now() - started) / 1000;
    // The log holds what the bench's earlier parts logged too: the rate is of every event memory read, on memory's own
    // clock from following the log to caught up (not the process's start, which takes seconds on a loaded machine).
    const caught = (await memoryStats(nc)).catchUp ?? { events: target, ms: wallSeconds * 1000 };
    const indexPerSecond = caught.events / (caught.ms / 1000);
    options.log(
      `memory indexed ${caught.events} log events (${filled} of them the bench's messages) in ${(caught.ms / 1000).toFixed(1)} s (${indexPerSecond.toFixed(0)}/s; ${wallSeconds.toFixed(1)} s with the process's start; the log took ${appendRates[0]!.toFixed(0)}/s)`,
    );
    let embedPerSecond: number | undefined;
    await until(async () => vectorsDone(await memoryStats(nc)), 600_000, 'embedding');
    const embedded = await memoryStats(nc);
    if (embedded.vectors > 0) embedPerSecond = embedded.vectors / ((performance.now() - started) / 1000);
    const searches: MemorySearchFigure[] = [];
    let follow: MemoryFigure['follow'];
    for (const [index, size] of sizes.entries()) {
      if (index > 0) {
        const followStarted = performance.now();
        appendRates.push(await fillLog(nc, filled, size - filled));
        const events = size - filled;
        filled = size;
        const end = await lastSeq();
        await until(async () => (await memoryStats(nc)).lastSeq === end, 600_000, `indexing up to ${size}`);
        const indexedSeconds = (performance.now() - followStarted) / 1000;
        await until(async () => vectorsDone(await memoryStats(nc)), 600_000, `embedding up to ${size}`);
        const embeddedSeconds = (performance.now() - followStarted) / 1000;
        follow = { events, indexPerSecond: events / indexedSeconds, embeddedPerSecond: events / embeddedSeconds };
        options.log(`memory followed ${events} appended events at ${follow.indexPerSecond.toFixed(0)}/s full text, ${follow.embeddedPerSecond.toFixed(0)}/s with vectors (appended at ${appendRates.at(-1)!.toFixed(0)}/s)`);
      }
      const { latencyMs, mode } = await searchLatency(nc, options.searches);
      searches.push({ indexed: size, mode, latencyMs });
      options.log(`memory search at ${size} indexed (${mode}): p50 ${latencyMs.p50.toFixed(2)} ms, p99 ${latencyMs.p99.toFixed(2)} ms`);
    }
    const heap = await memoryStats(nc);
    return {
      appendPerSecond: appendRates.reduce((sum, rate) => sum + rate, 0) / appendRates.length,
      indexPerSecond,
      embedPerSecond,
      ...(follow ? { follow } : {}),
      searches,
      heapBytes: heap.heapUsed,
    };
  } finally {
    await memory.stop();
  }
}
