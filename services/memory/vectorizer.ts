import { ErrorCode, toErrorData } from '../../src/errors.ts';
import type { Logger } from '../../src/logging.ts';

/** What turns texts into vectors: the provider service's embed endpoint (see `src/bus/embed-client.ts`). */
export interface Embedder {
  embed(texts: string[], options?: { signal?: AbortSignal; timeoutMs?: number }): Promise<{ model: string; dimensions: number; vectors: number[][] }>;
}

/** Where the vectorizer puts an embedding; false when the chunk is gone. */
export type VectorSink = (tenant: string, id: string, vector: Float32Array) => Promise<boolean>;

/** Where the vectorizer puts many embeddings of one tenant at once; resolves with how many were stored. */
export type VectorBatchSink = (tenant: string, entries: ReadonlyArray<{ readonly id: string; readonly vector: Float32Array }>) => Promise<number>;

/** Whether memory can rank by vectors now, and if not why. */
export type VectorStatus = { readonly state: 'off'; readonly reason: string } | { readonly state: 'on'; readonly model: string; readonly dimensions: number } | { readonly state: 'waiting'; readonly reason: string };

/** Embeds indexed chunks in the background, in batches, and query texts on demand. */
export interface Vectorizer {
  /** Queues chunks of a tenant for embedding. */
  enqueue(tenant: string, chunks: ReadonlyArray<{ id: string; text: string }>): void;
  /** A query's vector, or undefined when none can be had within `timeoutMs` (search is then full-text). */
  embedQuery(text: string, timeoutMs: number, signal?: AbortSignal): Promise<Float32Array | undefined>;
  /** Forgets what waits for a tenant's session, e.g. when it was deleted. */
  drop(tenant: string, sessionId: string): void;
  status(): VectorStatus;
  /** Chunks waiting for their embedding. */
  pending(): number;
  /** Resolves once nothing waits (or vectors are off). */
  idle(): Promise<void>;
  stop(): void;
}

/** Options of {@link createVectorizer}. */
export interface VectorizerOptions {
  /** Undefined: no embedding model is configured, and search is full-text only. */
  readonly embedder: Embedder | undefined;
  /** Why there is no embedder; default 'no embedding provider configured'. */
  readonly offReason?: string;
  readonly sink: VectorSink;
  /** When given, a batch's vectors go here, per tenant, in slices of 32 (one graph insert each), instead of one by one to `sink`. */
  readonly sinkMany?: VectorBatchSink;
  readonly logger: Logger;
  /** Texts per embed request; default 256 (`MAX_EMBED_INPUTS`, one request). */
  readonly batchSize?: number;
  /**
   * Batches in flight at once; default {@link DEFAULT_CONCURRENCY}. One at a time caps vectors at a batch per
   * embedder latency: 1,024 chunks/s behind a remote model that takes 250 ms.
   */
  readonly concurrency?: number;
  /** Longest wait of one batch; default 30 s. */
  readonly timeoutMs?: number;
  /** Wait after a failed batch, doubling up to 60 s; default 1 s. */
  readonly retryMs?: number;
}

/** Embedding batches in flight at once, by default. */
export const DEFAULT_CONCURRENCY = 2;
const QUERY_CACHE_SIZE = 256;
/** Vectors stored between two turns of the event loop: a batch of 256 inserts must not hold a search for long. */
const YIELD_EVERY = 16;
/** Vectors of one graph insert when they go in batches (`sinkMany`). */
const SLICE = 32;

/** Resolves after the I/O waiting now (a search request) had its turn. */
function yieldToEventLoop(): Promise<void> {
  return new Promise((resolve) => setImmediate(resolve));
}

/** Codes of embedding failures that no retry mends: vectors go off until the next start or rebuild. */
const PERMANENT_CODES: ReadonlySet<string> = new Set([ErrorCode.invalidInput, ErrorCode.unsupported, 'unauthorized', ErrorCode.notFound, 'spend_limit']);

/**
 * Feeds the vector side of the index, with up to `concurrency` batches in flight. A batch that fails for a reason that may pass (no provider yet, a
 * timeout, rate limits: a retryable error) is tried again with backoff; one the provider refuses as a request
 * (`bad_request`, an input too long for the model) is sent again chunk by chunk, and a chunk refused alone is left
 * to full text; any other failure that cannot pass (no embedding model, a key refused, a model not found) turns
 * vectors off until the next start or rebuild, and search says `full-text`. Query vectors are cached.
 */
export function createVectorizer(options: VectorizerOptions): Vectorizer {
  const { embedder, logger } = options;
  const batchSize = options.batchSize ?? 256;
  const queue: Array<{ tenant: string; id: string; text: string }> = [];
  const queryCache = new Map<string, Float32Array>();
  const controller = new AbortController();
  let status: VectorStatus = embedder ? { state: 'waiting', reason: 'no embedding yet' } : { state: 'off', reason: options.offReason ?? 'no embedding provider configured' };
  let retryMs = options.retryMs ?? 1_000;
  let idleWaiters: Array<() => void> = [];

  const settleIdle = () => {
    if ((queue.length > 0 || inFlight > 0) && status.state !== 'off') return;
    for (const resolve of idleWaiters) resolve();
    idleWaiters = [];
  };
  const turnOff = (reason: string) => {
    if (status.state !== 'off') logger.warn({ reason }, 'memory search is full-text only: no embeddings');
    status = { state: 'off', reason };
    queue.length = 0;
    settleIdle();
  };
  // A request the provider refuses as such (an input too long for the model) fails that batch, not every batch.
  const isBatchRefused = (code: string) => code === 'bad_request';
  // A failure no retry mends (no embedding model, a key refused, a model not found, a spend limit). Anything else,
  // an unexpected reply or error included, is tried again with backoff.
  const isPermanent = (code: string) => PERMANENT_CODES.has(code);
  // After a refused batch its chunks go one by one, so that only the chunk the provider refuses is left out; when
  // every one of them is refused too, the provider refuses all input (a gateway without the model): vectors go off.
  let singlyLeft = 0;
  let singlyEmbedded = 0;
  // Batches sent and not answered yet (their chunks are out of the queue), and whether sending waits for a retry.
  let inFlight = 0;
  let inFlightChunks = 0;
  let retrying = false;
  const concurrency = Math.max(1, options.concurrency ?? DEFAULT_CONCURRENCY);

  const store = async (batch: ReadonlyArray<{ tenant: string; id: string }>, vectors: number[][]) => {
    if (options.sinkMany) {
      // One graph insert per slice of a tenant's vectors; searches get their turn between slices.
      const byTenant = new Map<string, Array<{ id: string; vector: Float32Array }>>();
      for (const [index, item] of batch.entries()) {
        const vector = vectors[index];
        if (!vector) continue;
        let list = byTenant.get(item.tenant);
        if (!list) byTenant.set(item.tenant, (list = []));
        list.push({ id: item.id, vector: Float32Array.from(vector) });
      }
      for (const [tenant, entries] of byTenant) {
        for (let start = 0; start < entries.length; start += SLICE) {
          await options.sinkMany(tenant, entries.slice(start, start + SLICE));
          await yieldToEventLoop();
        }
      }
    } else {
      for (const [index, item] of batch.entries()) {
        const vector = vectors[index];
        if (vector) await options.sink(item.tenant, item.id, Float32Array.from(vector));
        // Each vector is an insert into the ANN graph: searches get their turn between slices of a batch.
        if (index % YIELD_EVERY === YIELD_EVERY - 1) await yieldToEventLoop();
      }
    }
  };

  // What became of a batch that failed; its chunks are back at the queue's front (the first of them alone when refused alone).
  const failed = async (batch: ReadonlyArray<{ tenant: string; id: string }>, single: boolean, err: unknown) => {
    const data = toErrorData(err);
    if (isBatchRefused(data.code)) {
      if (batch.length > 1) {
        singlyLeft = batch.length;
        singlyEmbedded = 0;
        return;
      }
      // That chunk stays searchable by full text; the rest go on.
      logger.warn({ err, tenant: batch[0]?.tenant, chunk: batch[0]?.id }, 'the provider refused to embed a chunk; it is searched by full text only');
      queue.splice(0, 1);
      if (single && singlyLeft > 0) {
        singlyLeft -= 1;
        if (singlyLeft === 0 && singlyEmbedded === 0) turnOff(`${data.code}: the provider refused every chunk of a batch, one by one: ${data.message}`);
      }
      return;
    }
    if (isPermanent(data.code)) {
      turnOff(`${data.code}: ${data.message}`);
      return;
    }
    status = { state: 'waiting', reason: `${data.code}: ${data.message}` };
    if (retrying) return;
    retrying = true;
    logger.warn({ err, retryInMs: retryMs, pending: queue.length + inFlightChunks }, 'embedding failed; trying again');
    await new Promise((resolve) => setTimeout(resolve, retryMs).unref());
    retryMs = Math.min(60_000, retryMs * 2);
    retrying = false;
  };

  // One batch: sent, its vectors stored, or its chunks put back and the failure dealt with; then the next batches.
  // `single`: one chunk of a refused batch, sent alone.
  const send = async (batch: Array<{ tenant: string; id: string; text: string }>, single: boolean) => {
    inFlight += 1;
    inFlightChunks += batch.length;
    try {
      const { model, dimensions, vectors } = await embedder!.embed(
        batch.map((item) => item.text),
        { signal: controller.signal, timeoutMs: options.timeoutMs ?? 30_000 },
      );
      if (single && singlyLeft > 0) {
        singlyLeft -= 1;
        singlyEmbedded += 1;
      }
      await store(batch, vectors);
      if (status.state !== 'on') logger.info({ model, dimensions }, 'memory search is hybrid: embeddings arrive');
      status = { state: 'on', model, dimensions };
      retryMs = options.retryMs ?? 1_000;
    } catch (err) {
      if (!controller.signal.aborted && status.state !== 'off') {
        queue.unshift(...batch);
        await failed(batch, single, err);
      }
    } finally {
      inFlight -= 1;
      inFlightChunks -= batch.length;
      pump();
      settleIdle();
    }
  };

  // Sends batches while fewer than `concurrency` are in flight (one at a time while a refused batch goes chunk by chunk,
  // none while a failure waits for its retry).
  const pump = () => {
    if (!embedder) return;
    while (queue.length > 0 && status.state !== 'off' && !controller.signal.aborted && !retrying) {
      const single = singlyLeft > 0;
      if (inFlight >= (single ? 1 : concurrency)) return;
      void send(queue.splice(0, single ? 1 : batchSize), single);
    }
  };

  return {
    enqueue(tenant, chunks) {
      if (!embedder || status.state === 'off' || chunks.length === 0) return;
      for (const chunk of chunks) queue.push({ tenant, id: chunk.id, text: chunk.text });
      // A microtask later, so the events read in one go share batches.
      queueMicrotask(pump);
    },
    async embedQuery(text, timeoutMs, signal) {
      if (!embedder || status.state === 'off') return undefined;
      const cached = queryCache.get(text);
      if (cached) return cached;
      try {
        const { model, dimensions, vectors } = await embedder.embed([text], { timeoutMs, ...(signal ? { signal } : {}) });
        if (status.state === 'waiting' && queue.length === 0) status = { state: 'on', model, dimensions };
        const vector = vectors[0] ? Float32Array.from(vectors[0]) : undefined;
        if (vector) {
          if (queryCache.size >= QUERY_CACHE_SIZE) queryCache.delete(queryCache.keys().next().value!);
          queryCache.set(text, vector);
        }
        return vector;
      } catch (err) {
        logger.debug({ err }, 'query embedding failed; searching full-text only');
        return undefined;
      }
    },
    drop(tenant, sessionId) {
      const prefix = `${sessionId}:`;
      for (let index = queue.length - 1; index >= 0; index--) {
        const item = queue[index]!;
        if (item.tenant === tenant && item.id.startsWith(prefix)) queue.splice(index, 1);
      }
    },
    status: () => status,
    pending: () => queue.length + inFlightChunks,
    idle: () => ((queue.length === 0 && inFlight === 0) || status.state === 'off' ? Promise.resolve() : new Promise((resolve) => idleWaiters.push(resolve))),
    stop() {
      controller.abort();
      for (const resolve of idleWaiters) resolve();
      idleWaiters = [];
    },
  };
}
