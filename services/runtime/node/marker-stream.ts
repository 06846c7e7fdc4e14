import { Bucket } from '@nats-io/kv';
import type { KV } from '@nats-io/kv';
import type { JsMsg } from '@nats-io/jetstream';
import type { Codec } from '../../../src/protocol/index.ts';
import { withTimeout } from '../../../src/with-timeout.ts';
import { RELEASED_PREFIX } from './released-markers.ts';
import type { MarkerEntry, MarkerListing, MarkerRemoval, MarkerValue } from './released-markers.ts';

// The release markers as messages of the leases bucket's stream: how they are listed and removed.

/**
 * The {@link MarkerRemoval} of a nats.js KV bucket: a stream purge filtered to the marker's subject, up to the
 * sequence after `revision` (`$JS.API.STREAM.PURGE.<stream>`; nats-server 2.3 and later).
 */
export function markerRemoval(kv: KV): MarkerRemoval {
  if (!(kv instanceof Bucket)) throw new TypeError('release markers need a nats.js KV bucket');
  const bucket = kv;
  return async (key, revision) => {
    await bucket.jsm.streams.purge(bucket.stream, { filter: bucket.fullKeyName(`${RELEASED_PREFIX}.${key}`), seq: revision + 1 });
  };
}

/**
 * The {@link MarkerListing} of a nats.js KV bucket: an ordered push consumer over `$KV.<bucket>.released.*.*` from the
 * given stream sequence, read up to the count pending at its creation. A removed marker's `DEL` is listed too, once.
 */
export function markerListing(kv: KV, codec: Codec, opTimeoutMs: number): MarkerListing {
  if (!(kv instanceof Bucket)) throw new TypeError('release markers need a nats.js KV bucket');
  const bucket = kv;
  // Three tokens exactly: `released.>` would also list the leases of a tenant named `released` (and purge them).
  const subject = bucket.fullKeyName(`${RELEASED_PREFIX}.*.*`);
  const keyStart = bucket.fullKeyName(`${RELEASED_PREFIX}.`).length;
  return async (from) => {
    const consumer = await withTimeout(
      bucket.js.consumers.getPushConsumer(bucket.stream, { filter_subjects: subject, ...(from > 0 ? { opt_start_seq: from } : {}) }),
      opTimeoutMs,
      'release marker listing',
    );
    const count = (await consumer.info(true)).num_pending;
    if (count === 0) {
      // Nothing to read: the consumer goes at once rather than after its inactivity threshold.
      void consumer.delete().catch(() => undefined);
      return [];
    }
    const entries: MarkerEntry[] = [];
    const toEntry = (message: JsMsg): MarkerEntry => {
      const operation = message.headers?.get('KV-Operation');
      const key = message.subject.slice(keyStart);
      if (operation === 'DEL' || operation === 'PURGE') return { key, revision: message.seq, lease: undefined };
      try {
        const value = codec.decode(message.data) as Partial<MarkerValue> | undefined;
        return { key, revision: message.seq, lease: typeof value?.lease === 'number' ? value.lease : undefined };
      } catch {
        return { key, revision: message.seq, lease: undefined };
      }
    };
    const messages = await consumer.consume();
    try {
      await withTimeout(
        (async () => {
          for await (const message of messages) {
            entries.push(toEntry(message));
            if (entries.length >= count || message.info.pending === 0) break;
          }
        })(),
        opTimeoutMs,
        'release marker listing',
      );
    } finally {
      await messages.close().catch(() => undefined);
      void consumer.delete().catch(() => undefined);
    }
    return entries;
  };
}
