import { Kvm } from '@nats-io/kv';
import type { KvWatchEntry } from '@nats-io/kv';
import type { NatsConnection, Status } from '@nats-io/nats-core';
import type { Logger } from '../../src/logging.ts';

/**
 * Watches one bucket made by the runtime: until it exists, tries again every `retryMs`. A deleted or purged
 * key goes to `onRemove`, a written one to `onPut`.
 *
 * After the connection comes back, the watch starts over from the bucket as it is. A watch's consumer resumes
 * after the last message it delivered, and a message purged from the stream in between (the runtime compacts
 * lease delete markers a minute after writing them) would never reach it: the key would stay shown for good. So
 * the new watch's first entries (the bucket as it is) are compared with the keys shown before, and a key they no
 * longer hold goes to `onRemove`, once those first entries are in (the first entry flagged `isUpdate`, or at once
 * when the bucket holds no message).
 */
export function watchBucket(deps: {
  nc: NatsConnection;
  bucket: string;
  logger: Logger;
  retryMs: number;
  onPut: (entry: KvWatchEntry) => void;
  onRemove: (key: string) => void;
}): { stop(): void } {
  let stopped = false;
  let timer: ReturnType<typeof setTimeout> | undefined;
  let watch: { stop(): void } | undefined;
  /** Which start is current: one overtaken by a reconnect stops itself. */
  let generation = 0;
  /** Keys last written (given to `onPut`) and not removed since. */
  const present = new Set<string>();
  const remove = (key: string) => {
    present.delete(key);
    deps.onRemove(key);
  };
  const start = async () => {
    if (stopped) return;
    const mine = ++generation;
    let kv: Awaited<ReturnType<Kvm['open']>>;
    let iterator: Awaited<ReturnType<Awaited<ReturnType<Kvm['open']>>['watch']>>;
    try {
      kv = await new Kvm(deps.nc).open(deps.bucket);
      await kv.status();
      iterator = await kv.watch();
    } catch (err) {
      deps.logger.debug({ err, bucket: deps.bucket }, 'bucket not there yet');
      if (mine === generation) timer = setTimeout(() => void start(), deps.retryMs);
      return;
    }
    if (stopped || mine !== generation) {
      iterator.stop();
      return;
    }
    watch = iterator;
    // Keys shown before this watch (one before a reconnect): each is struck off as this watch delivers it.
    let unseen: Set<string> | undefined = present.size > 0 ? new Set(present) : undefined;
    const sweep = () => {
      if (!unseen) return;
      const gone = unseen;
      unseen = undefined;
      for (const key of gone) remove(key);
    };
    void (async () => {
      for await (const entry of iterator) {
        // Entries a stopped watch still had buffered are older than the new watch's: they would undo its sweep.
        if (stopped || mine !== generation) break;
        unseen?.delete(entry.key);
        if (entry.operation === 'PUT') {
          present.add(entry.key);
          deps.onPut(entry);
        } else {
          remove(entry.key);
        }
        if (entry.isUpdate) sweep();
      }
    })().catch((err: unknown) => deps.logger.warn({ err, bucket: deps.bucket }, 'bucket watch stopped'));
    if (unseen) {
      // An empty bucket's watch delivers nothing to flag the end of its first entries.
      const status = await kv.status().catch(() => undefined);
      if (status?.values === 0 && !stopped && mine === generation) sweep();
    }
  };
  // nats.js hands out a queued iterator: its `stop()` unregisters it from the connection at once, where ending the
  // generator (`return()`) waits for the next status, which a steady connection may never send.
  const statuses = deps.nc.status() as AsyncIterable<Status> & { stop?: () => void };
  void (async () => {
    for await (const status of statuses) {
      if (stopped) break;
      if (status.type !== 'reconnect') continue;
      watch?.stop();
      watch = undefined;
      clearTimeout(timer);
      void start();
    }
  })().catch((err: unknown) => deps.logger.debug({ err, bucket: deps.bucket }, 'connection status not followed'));
  void start();
  return {
    stop() {
      stopped = true;
      clearTimeout(timer);
      watch?.stop();
      statuses.stop?.();
    },
  };
}
