import { Kvm } from '@nats-io/kv';
import type { KvWatchEntry } from '@nats-io/kv';
import type { NatsConnection } from '@nats-io/nats-core';
import type { Logger } from '../../src/logging.ts';

/**
 * Watches one bucket made by the runtime: until it exists, tries again every `retryMs`. A deleted or purged
 * key goes to `onRemove`, a written one to `onPut`.
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
  const start = async () => {
    if (stopped) return;
    let iterator: Awaited<ReturnType<Awaited<ReturnType<Kvm['open']>>['watch']>>;
    try {
      const kv = await new Kvm(deps.nc).open(deps.bucket);
      await kv.status();
      iterator = await kv.watch();
    } catch (err) {
      deps.logger.debug({ err, bucket: deps.bucket }, 'bucket not there yet');
      timer = setTimeout(() => void start(), deps.retryMs);
      return;
    }
    watch = iterator;
    if (stopped) iterator.stop();
    void (async () => {
      for await (const entry of iterator) {
        if (entry.operation === 'PUT') deps.onPut(entry);
        else deps.onRemove(entry.key);
      }
    })().catch((err: unknown) => deps.logger.warn({ err, bucket: deps.bucket }, 'bucket watch stopped'));
  };
  void start();
  return {
    stop() {
      stopped = true;
      clearTimeout(timer);
      watch?.stop();
    },
  };
}
