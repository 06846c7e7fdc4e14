import type { KV } from '@nats-io/kv';
import type { NatsConnection } from '@nats-io/nats-core';
import { AgentbusError, ErrorCode } from '../../../src/errors.ts';
import { ContentType, tombstoneKey } from '../../../src/protocol/index.ts';
import type { Codec, Tombstone } from '../../../src/protocol/index.ts';
import { presetHeaders } from '../../../src/bus/encoded-headers.ts';
import { createReplyMux } from '../../../src/bus/reply-mux.ts';
import { request } from '../../../src/bus/request.ts';
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
export function createRuntimeTombstones(deps: {
  kv: KV;
  codec: Codec;
  nodeId: string;
  now: () => number;
  /** With the bucket's name: a session's tombstone is read by a direct get through a reply mux, not `kv.get`. */
  direct?: { nc: NatsConnection; bucket: string; timeoutMs?: number };
}): RuntimeTombstones {
  const { kv, codec } = deps;
  const read = deps.direct ? directRead(deps.direct, kv) : async (key: string) => (await kv.get(key))?.operation === 'PUT';
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
    isDeleted: (tenant, sessionId) => read(tombstoneKey(tenant, sessionId)),
  };
}

/**
 * Whether a key of the bucket holds a value (its last message a put, not a delete or purge marker), read as `kv.get`
 * reads it, by a direct get of the key's last message (`$JS.API.DIRECT.GET.KV_<bucket>`), but with the reply taken
 * through a mux: every session a node opens reads its tombstone, and nats.js builds an error object (a stack
 * trace) for every request it resolves. A bucket made without direct gets (`allow_direct`, asked once: a direct get
 * there is refused) is read with `kv.get`.
 */
function directRead(direct: { nc: NatsConnection; bucket: string; timeoutMs?: number }, kv: KV): (key: string) => Promise<boolean> {
  const { nc, bucket } = direct;
  const subject = `$JS.API.DIRECT.GET.KV_${bucket}`;
  const headers = presetHeaders([['Content-Type', ContentType.json]]);
  const replies = createReplyMux(nc);
  const timeoutMs = direct.timeoutMs ?? 10_000;
  const encoder = new TextEncoder();
  let directGets: Promise<boolean> | undefined;
  const directGetsOn = () =>
    (directGets ??= kv.status().then(
      (status) => status.streamInfo.config.allow_direct === true,
      () => {
        // Asked again next time; this read goes the way that always works.
        directGets = undefined;
        return false;
      },
    ));
  return async (key) => {
    if (!(await directGetsOn())) return (await kv.get(key))?.operation === 'PUT';
    const body = encoder.encode(JSON.stringify({ last_by_subj: `$KV.${bucket}.${key}` }));
    const reply = await request(nc, subject, body, { timeoutMs, headers, replies });
    if (reply.headers?.hasError) {
      if (reply.headers.code === 404) return false;
      throw new AgentbusError(ErrorCode.internal, `reading the tombstone ${key} failed: ${reply.headers.code} ${reply.headers.description}`, { retryable: reply.headers.code >= 500 });
    }
    // nats.js reads a message without the header as a put (`KvEntry.operation`).
    const operation = reply.headers?.get('KV-Operation') ?? '';
    return operation === '' || operation === 'PUT';
  };
}
