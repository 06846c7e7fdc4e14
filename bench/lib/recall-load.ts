import { jetstreamManager } from '@nats-io/jetstream';
import type { NatsConnection } from '@nats-io/nats-core';
import { createCodec, streamNames } from '../../src/protocol/index.ts';
import type { ServiceProcess } from '../../test/helpers/service-process.ts';
import { closedLoop } from './load.ts';
import { memoryStats } from './memory-load.ts';
import { PROMPT } from './workload.ts';

/** How often a turn's first model call got memory's recall section, under load with a slow embedder. */
export interface RecallFigure {
  readonly concurrency: number;
  /** How long the provider's embedder takes per request (a remote embedding model: 100–400 ms). */
  readonly embedDelayMs: number;
  readonly sessionsPerSecond: number;
  /** First model calls of a turn seen by the provider during the run. */
  readonly steps: number;
  /** Of those, the ones whose context held the recall section (memory answered in time, with hits). */
  readonly recalled: number;
  readonly share: number;
  /** Memory's own time per search request over the run (`$SRV.STATS`, from receipt to answer): what is memory's part. */
  readonly memorySearchMs?: number;
  readonly memorySearches?: number;
  /** The workload's log appends per second during the run, and memory's indexing of them (it follows the log). */
  readonly appendPerSecond?: number;
  readonly indexPerSecond?: number;
  /** Log events memory had not yet indexed when the run ended. */
  readonly indexLagEvents?: number;
}

/** What {@link measureRecall} runs on. */
export interface RecallDeps {
  readonly nc: NatsConnection;
  readonly start: (entry: string, env?: Record<string, string>) => ServiceProcess;
  /** One session of the workload with `text` as its prompt, against the runtime started here. */
  readonly session: (sessionId: string, options: { text: string; timeoutMs?: number }) => Promise<void>;
  readonly scriptPath: string;
  readonly durationMs: number;
  readonly concurrency: number;
  readonly embedDelayMs: number;
  readonly log: (text: string) => void;
}

/**
 * The workload at `concurrency` sessions with memory on: a runtime (recall at its defaults: 300 ms wait), the memory
 * service, a tool worker, and a provider whose embedder takes `embedDelayMs` and who counts the turns whose first
 * model call carried recalled snippets. Every session's prompt differs a little (a note number), so that snippets of
 * earlier sessions are not the text the window already holds, and the query embedding cache does not answer.
 */
export async function measureRecall(deps: RecallDeps): Promise<RecallFigure> {
  const { start, log } = deps;
  const codec = createCodec();
  const provider = start('bench/lib/recall-provider-main.ts', { AGENTBUS_SCRIPT: deps.scriptPath, BENCH_EMBED_DELAY_MS: String(deps.embedDelayMs), LOG_LEVEL: 'warn' });
  const memory = start('services/memory/main.ts', { AGENTBUS_EMBED_PROVIDER: 'scripted', AGENTBUS_MEMORY_SNAPSHOT_EVENTS: '0', LOG_LEVEL: 'info' });
  const tools = start('bench/lib/tool-worker-main.ts', { LOG_LEVEL: 'warn' });
  const runtime = start('services/runtime/main.ts', { AGENTBUS_TENANT_RATE: '0', AGENTBUS_SESSION_RATE: '0', LOG_LEVEL: 'info' });
  try {
    await Promise.all([
      provider.waitFor('bench recall provider ready', 60_000),
      memory.waitFor('memory caught up with the log', 600_000),
      tools.waitFor('bench tool worker ready', 60_000),
      runtime.waitFor('runtime started', 60_000),
    ]);
    const count = async () => codec.decode((await deps.nc.request('bench.recall.count', new Uint8Array(), { timeout: 10_000 })).data) as { steps: number; recalled: number };
    const tag = `rc${Date.now().toString(36)}`;
    const text = (index: number) => `${PROMPT} Note ${index}: keep the ${index % 7 === 0 ? 'gamma' : 'alpha'} total.`;
    // A few sessions first, so that memory holds prompts like the ones to come.
    await closedLoop(async (index) => deps.session(`${tag}w${index}`, { text: text(index) }), { concurrency: 10, durationMs: 1_000, maxSessions: 50 });
    // Memory may be too busy to answer its stats within one timeout (its loop blocked by indexing under this load):
    // asked up to three times, so that one slow answer does not end the whole bench.
    const statsReply = async () => {
      for (let attempt = 1; ; attempt += 1) {
        try {
          return await deps.nc.request('$SRV.STATS.agentbus-memory', new Uint8Array(), { timeout: 10_000 });
        } catch (err) {
          if (attempt >= 3) throw err;
        }
      }
    };
    const searchStats = async () => {
      const reply = await statsReply();
      const stats = JSON.parse(new TextDecoder().decode(reply.data)) as { endpoints?: Array<{ name: string; num_requests: number; processing_time: number }> };
      const search = stats.endpoints?.find((endpoint) => endpoint.name === 'search');
      return { requests: search?.num_requests ?? 0, nanos: search?.processing_time ?? 0 };
    };
    const jsm = await jetstreamManager(deps.nc);
    const logLast = async () => (await jsm.streams.info(streamNames('agentbus').log)).state.last_seq;
    const searchesBefore = await searchStats();
    const before = await count();
    const [logBefore, memoryBefore] = await Promise.all([logLast(), memoryStats(deps.nc)]);
    const loadStarted = performance.now();
    const load = await closedLoop(async (index) => deps.session(`${tag}${index}`, { text: text(index) }), { concurrency: deps.concurrency, durationMs: deps.durationMs });
    const [logAfter, memoryAfter] = await Promise.all([logLast(), memoryStats(deps.nc)]);
    const loadSeconds = (performance.now() - loadStarted) / 1000;
    const after = await count();
    const searchesAfter = await searchStats();
    const appendPerSecond = (logAfter - logBefore) / loadSeconds;
    const indexPerSecond = (memoryAfter.indexed - memoryBefore.indexed) / loadSeconds;
    const indexLagEvents = Math.max(0, logAfter - memoryAfter.lastSeq);
    const memorySearches = searchesAfter.requests - searchesBefore.requests;
    const memorySearchMs = memorySearches === 0 ? undefined : (searchesAfter.nanos - searchesBefore.nanos) / 1e6 / memorySearches;
    const steps = after.steps - before.steps;
    const recalled = after.recalled - before.recalled;
    const figure = { concurrency: deps.concurrency, embedDelayMs: deps.embedDelayMs, sessionsPerSecond: load.sessionsPerSecond, steps, recalled, share: steps === 0 ? 0 : recalled / steps, memorySearches, ...(memorySearchMs === undefined ? {} : { memorySearchMs }), appendPerSecond, indexPerSecond, indexLagEvents };
    log(`recall at ${deps.concurrency} concurrent, embedder ${deps.embedDelayMs} ms: ${recalled} of ${steps} turns got recalled snippets (${(figure.share * 100).toFixed(1)}%), ${load.sessionsPerSecond.toFixed(0)} sessions/s; memory answered ${memorySearches} searches in ${memorySearchMs?.toFixed(1) ?? 'n/a'} ms each; the workload appended ${appendPerSecond.toFixed(0)} log events/s, memory indexed ${indexPerSecond.toFixed(0)}/s (${indexLagEvents} behind at the end)`);
    return figure;
  } finally {
    await Promise.all([runtime.stop(), tools.stop(), memory.stop(), provider.stop()]);
  }
}
