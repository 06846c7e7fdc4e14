import type { KV } from '@nats-io/kv';
import { tombstoneKey } from '../../../src/protocol/index.ts';
import type { Codec, Tombstone } from '../../../src/protocol/index.ts';
import { isRevisionConflict } from '../../../src/bus/revision-conflict.ts';

/**
 * The runtime's side of the tombstones bucket (`AGENTBUS_TOMBSTONES`, one key `<tenant>.<sessionId>` per
 * deleted session): it writes them, and reads one when it opens a session, so that a deleted id is refused
 * instead of starting a fresh session.
 */
export interface RuntimeTombstones {
  /** Writes the session's tombstone; resolves `false` when one was there already. */
  mark(tenant: string, sessionId: string): Promise<boolean>;
  /** True when the session has a tombstone. */
  isDeleted(tenant: string, sessionId: string): Promise<boolean>;
}

/** Creates the tombstone writer of one node over the bucket. */
export function createRuntimeTombstones(deps: { kv: KV; codec: Codec; nodeId: string; now: () => number }): RuntimeTombstones {
  const { kv, codec } = deps;
  return {
    async mark(tenant, sessionId) {
      const key = tombstoneKey(tenant, sessionId);
      const value: Tombstone = { deletedAt: deps.now(), node: deps.nodeId };
      try {
        await kv.create(key, codec.encode(value));
        return true;
      } catch (error) {
        // `create` refuses a key that holds a value: an earlier delete wrote it.
        const exists = isRevisionConflict(error) || /exists/i.test((error as Error).message ?? '');
        if (exists && (await this.isDeleted(tenant, sessionId))) return false;
        throw error;
      }
    },
    async isDeleted(tenant, sessionId) {
      const entry = await kv.get(tombstoneKey(tenant, sessionId));
      return entry?.operation === 'PUT';
    },
  };
}
