import type { KV } from '@nats-io/kv';
import type { z } from 'zod';
import type { Codec } from '../../../src/protocol/index.ts';
import { isRevisionConflict } from '../../../src/bus/revision-conflict.ts';
import { withTimeout } from '../../../src/with-timeout.ts';

/** A key's stored bytes and revision. */
export interface CellEntry {
  readonly bytes: Uint8Array;
  readonly revision: number;
}

/**
 * The few key-value operations the limits use: a JetStream KV bucket in the runtime ({@link kvCellStore}), a map in
 * unit tests. `create` and `update` reject with a revision conflict (see `isRevisionConflict`) when the key moved on.
 */
export interface CellStore {
  get(key: string): Promise<CellEntry | undefined>;
  create(key: string, bytes: Uint8Array): Promise<number>;
  update(key: string, bytes: Uint8Array, revision: number): Promise<number>;
}

/** The bucket as a {@link CellStore}, every operation bounded by `timeoutMs`. */
export function kvCellStore(kv: KV, timeoutMs = 5_000): CellStore {
  return {
    async get(key) {
      const entry = await withTimeout(kv.get(key), timeoutMs, `limits read ${key}`);
      if (!entry || entry.operation !== 'PUT') return undefined;
      return { bytes: entry.value, revision: entry.revision };
    },
    create: (key, bytes) => withTimeout(kv.create(key, bytes), timeoutMs, `limits create ${key}`),
    update: (key, bytes, revision) => withTimeout(kv.update(key, bytes, revision), timeoutMs, `limits update ${key}`),
  };
}

/** The outcome of {@link LimitCells.change}: whether `next` wrote, and the value it saw last. */
export interface CellChange<T> {
  readonly written: boolean;
  readonly value: T | undefined;
}

/**
 * Values of the limits bucket, changed by compare-and-set on the key's revision. The last value and revision this
 * node read or wrote are kept, so a change made where this node wrote last costs one round trip (the write); a
 * write another node got in first costs a read and a write more. Changes of one key on this node run one after
 * another, so they never conflict with each other.
 */
export interface LimitCells {
  /** The key's value, read from the bucket now. */
  read<T>(key: string, schema: z.ZodType<T>): Promise<T | undefined>;
  /** The key's value as this node last saw it, read when it has seen none. */
  peek<T>(key: string, schema: z.ZodType<T>): Promise<T | undefined>;
  /**
   * Writes `next(current)` unless it returns undefined. A refusal made on a kept value is checked again on a fresh
   * read, so no call is refused on what another node already changed.
   */
  change<T>(key: string, schema: z.ZodType<T>, next: (current: T | undefined) => T | undefined): Promise<CellChange<T>>;
}

/** Creates the {@link LimitCells} of one node over `store`. */
export function createLimitCells(deps: { store: CellStore; codec: Codec; maxAttempts?: number }): LimitCells {
  const { store, codec } = deps;
  const maxAttempts = deps.maxAttempts ?? 20;
  const kept = new Map<string, { value: unknown; revision: number }>();
  const chains = new Map<string, Promise<unknown>>();

  async function fetch<T>(key: string, schema: z.ZodType<T>): Promise<{ value: T | undefined; revision: number }> {
    const entry = await store.get(key);
    if (!entry) {
      kept.delete(key);
      return { value: undefined, revision: 0 };
    }
    // A value this version cannot read (another version wrote it) counts as none, and is overwritten.
    const parsed = schema.safeParse(safeDecode(entry.bytes));
    const value = parsed.success ? parsed.data : undefined;
    kept.set(key, { value, revision: entry.revision });
    return { value, revision: entry.revision };
  }

  function safeDecode(bytes: Uint8Array): unknown {
    try {
      return codec.decode(bytes);
    } catch {
      return undefined;
    }
  }

  /** Runs `work` after the key's earlier changes on this node. */
  function serial<R>(key: string, work: () => Promise<R>): Promise<R> {
    const before = chains.get(key) ?? Promise.resolve();
    const run = before.then(work, work);
    const settled = run.catch(() => undefined);
    chains.set(key, settled);
    void settled.then(() => {
      if (chains.get(key) === settled) chains.delete(key);
    });
    return run;
  }

  return {
    read: async (key, schema) => (await fetch(key, schema)).value,
    async peek(key, schema) {
      const entry = kept.get(key);
      return entry ? (entry.value as never) : (await fetch(key, schema)).value;
    },
    change(key, schema, next) {
      return serial(key, async () => {
        let known = kept.get(key) as { value: ReturnType<typeof schema.parse> | undefined; revision: number } | undefined;
        let fresh = false;
        if (!known) {
          known = await fetch(key, schema);
          fresh = true;
        }
        for (let attempt = 1; ; attempt++) {
          const value = next(known.value);
          if (value === undefined) {
            if (fresh) return { written: false, value: known.value };
            known = await fetch(key, schema);
            fresh = true;
            continue;
          }
          const bytes = codec.encode(value);
          try {
            const revision = known.revision === 0 ? await store.create(key, bytes) : await store.update(key, bytes, known.revision);
            kept.set(key, { value, revision });
            return { written: true, value };
          } catch (err) {
            if (!isRevisionConflict(err) || attempt >= maxAttempts) throw err;
            known = await fetch(key, schema);
            fresh = true;
          }
        }
      });
    },
  };
}
