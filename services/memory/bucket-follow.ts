import { DeliverPolicy, jetstream } from '@nats-io/jetstream';
import type { NatsConnection } from '@nats-io/nats-core';
import type { Logger } from '../../src/logging.ts';

/** One entry of a key-value bucket as its stream delivers it. */
export interface BucketEntry {
  /** The key, without the `$KV.<bucket>.` subject prefix. */
  readonly key: string;
  /** `PUT`, or `DEL` / `PURGE` for a key deleted or purged. */
  readonly operation: 'PUT' | 'DEL' | 'PURGE';
  /** The entry's stream sequence (its revision). */
  readonly seq: number;
  /** The size of the value (`Nats-Msg-Size` of a headers-only delivery), 0 when unknown. */
  readonly size: number;
}

/** A bucket followed from its start: `ready` once every entry it held at `lastSeq` was handed on. */
export interface BucketFollow {
  readonly ready: Promise<void>;
  stop(): void;
}

/** Options of {@link followBucket}. */
export interface BucketFollowOptions {
  readonly nc: NatsConnection;
  readonly bucket: string;
  /** The bucket stream's last sequence when following began (ready at once when 0). */
  readonly lastSeq: number;
  /** `last`: each key's newest entry only, headers only (sizes, not values); `all`: every entry with its value. */
  readonly deliver: 'last' | 'all';
  /** Hears each entry in order; the next waits for it. */
  readonly onEntry: (entry: BucketEntry) => void | Promise<void>;
  readonly logger: Logger;
  /** What stops when the consumer fails, for the error line. */
  readonly what: string;
}

/**
 * Follows a key-value bucket's stream from its start with an ordered consumer, handing each entry to `onEntry`:
 * the one loop memory's tombstone watch and state usage count share.
 */
export async function followBucket(options: BucketFollowOptions): Promise<BucketFollow> {
  const { nc, bucket, logger } = options;
  const stream = `KV_${bucket}`;
  const keyStart = `$KV.${bucket}.`.length;
  const consumer = await jetstream(nc).consumers.get(stream, {
    filter_subjects: `$KV.${bucket}.>`,
    ...(options.deliver === 'last' ? { deliver_policy: DeliverPolicy.LastPerSubject, headers_only: true } : { deliver_policy: DeliverPolicy.All }),
  });
  const messages = await consumer.consume();
  let resolveReady: () => void = () => undefined;
  const ready = new Promise<void>((resolve) => {
    resolveReady = resolve;
  });
  // The last sequence may name an entry purged since: nothing pending is ready too.
  if (options.lastSeq === 0 || (await consumer.info(true)).num_pending === 0) resolveReady();
  void (async () => {
    for await (const message of messages) {
      const operation = message.headers?.get('KV-Operation');
      await options.onEntry({
        key: message.subject.slice(keyStart),
        operation: operation === 'DEL' || operation === 'PURGE' ? operation : 'PUT',
        seq: message.seq,
        size: Number(message.headers?.get('Nats-Msg-Size') ?? 0) || 0,
      });
      if (message.seq >= options.lastSeq || message.info.pending === 0) resolveReady();
    }
  })().catch((err: unknown) => logger.error({ err }, `${options.what} stopped`));
  return { ready, stop: () => void messages.close() };
}
