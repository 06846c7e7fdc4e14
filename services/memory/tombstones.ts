import { followBucket } from './bucket-follow.ts';
import type { NatsConnection } from '@nats-io/nats-core';
import type { Logger } from '../../src/logging.ts';
import { parseTombstoneKey, streamNames } from '../../src/protocol/index.ts';
import { streamOnceThere } from './stream-once-there.ts';

/** The deleted sessions this memory instance knows of, kept in step with the tombstones bucket. */
export interface TombstoneWatch {
  /** Resolves once every tombstone that was in the bucket when watching began has been handed on. */
  readonly ready: Promise<void>;
  /** True when the session was deleted. */
  has(tenant: string, sessionId: string): boolean;
  /** Tombstones known. */
  size(): number;
  stop(): void;
}

/** Options of {@link watchTombstones}. */
export interface TombstoneWatchOptions {
  readonly nc: NatsConnection;
  /** Subject prefix; default `agentbus`. */
  readonly prefix?: string;
  readonly logger: Logger;
  /** Hears each session deleted (those deleted before the watch began too), in order; awaited before the next. */
  readonly onTombstone: (tenant: string, sessionId: string) => Promise<void> | void;
  /** Stops waiting for the bucket to exist. */
  readonly signal?: AbortSignal;
  /** How often to look for the bucket while it does not exist yet; default 250 ms. */
  readonly pollMs?: number;
}

/**
 * Follows the `AGENTBUS_TOMBSTONES` bucket (keys `<tenant>.<sessionId>`) through an ordered consumer on its
 * stream, from its first message: every memory instance hears every delete, whenever it started, and so
 * forgets the session and refuses to index it again. A key deleted or purged by an operator lifts the
 * tombstone. Waits for the bucket while it does not exist: the runtime creates it, memory may only read it.
 */
export async function watchTombstones(options: TombstoneWatchOptions): Promise<TombstoneWatch> {
  const { nc, logger } = options;
  const bucket = streamNames(options.prefix).tombstones;
  const stream = `KV_${bucket}`;
  const lastSeq = (await streamOnceThere(nc, stream, { logger, what: 'the tombstones bucket', ...(options.pollMs ? { pollMs: options.pollMs } : {}), ...(options.signal ? { signal: options.signal } : {}) })).lastSeq;
  const deleted = new Set<string>();
  const follow = await followBucket({
    nc,
    bucket,
    lastSeq,
    deliver: 'all',
    logger,
    what: 'tombstone watch',
    onEntry: async ({ key, operation }) => {
      const session = parseTombstoneKey(key);
      if (!session) {
        logger.warn({ subject: `$KV.${bucket}.${key}` }, 'skipped a tombstone whose key is not <tenant>.<sessionId>');
      } else if (operation !== 'PUT') {
        deleted.delete(key);
      } else if (!deleted.has(key)) {
        deleted.add(key);
        try {
          await options.onTombstone(session.tenant, session.sessionId);
        } catch (err) {
          logger.warn({ err, ...session }, 'a deleted session could not be forgotten');
        }
      }
    },
  });
  return {
    ready: follow.ready,
    has: (tenant, sessionId) => deleted.has(`${tenant}.${sessionId}`),
    size: () => deleted.size,
    stop: follow.stop,
  };
}
