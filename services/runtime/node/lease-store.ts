import { Bucket } from '@nats-io/kv';
import type { KV, KvEntry } from '@nats-io/kv';
import { Empty, headers } from '@nats-io/nats-core';
import type { Codec } from '../../../src/protocol/index.ts';
import type { Logger } from '../../../src/logging.ts';
import { withTimeout } from '../../../src/with-timeout.ts';

/** A lease as stored in the KV bucket, one key per session (`<tenant>.<sessionId>`). */
export interface LeaseValue {
  /** Owner node id; empty once released. The lease is the owner's while that node is alive (`NodeLiveness`). */
  readonly node: string;
  /** True while the session has a turn running or queued: a node that finds its owner dead resumes it. */
  readonly active: boolean;
}

/** A session, named by its tenant and id. */
export interface OrphanSession {
  readonly tenant: string;
  readonly sessionId: string;
}

/** The lease key of a session: `<tenant>.<sessionId>`. */
export const leaseKey = (tenant: string, sessionId: string): string => `${tenant}.${sessionId}`;

/** The session a lease key names, or undefined for a key that names none. */
export function sessionOfKey(key: string): OrphanSession | undefined {
  const [tenant, sessionId] = key.split('.');
  return tenant && sessionId ? { tenant, sessionId } : undefined;
}

/**
 * The leases bucket as the lease code uses it: each operation bounded (a lease claim must never stall a
 * session's messages for good), and leases encoded and decoded in one place.
 */
export interface LeaseStore {
  create(key: string, value: LeaseValue): Promise<number>;
  get(key: string): Promise<KvEntry | null>;
  update(key: string, value: LeaseValue, revision: number): Promise<number>;
  /** Deletes the key if its last revision is `previousSeq`; resolves with the delete marker's stream sequence. */
  delete(key: string, previousSeq: number): Promise<number>;
  /** Purges the key (all its messages but a purge marker); resolves with the purge marker's stream sequence. */
  purge(key: string): Promise<number>;
  /** A stored lease's value; undefined (and a warning) when it cannot be read. */
  decode(bytes: Uint8Array): LeaseValue | undefined;
  /** The lease an entry holds: undefined for a missing entry, a delete or purge, or an unreadable value. */
  valueOf(entry: KvEntry | null): LeaseValue | undefined;
}

/** Creates the {@link LeaseStore} over a KV bucket, every operation bounded by `opTimeoutMs`. */
export function createLeaseStore(deps: { kv: KV; codec: Codec; logger: Logger; opTimeoutMs: number }): LeaseStore {
  const { kv, codec, opTimeoutMs: bound } = deps;
  if (!(kv instanceof Bucket)) throw new TypeError('leases need a nats.js KV bucket');
  const bucket = kv;
  // A delete or purge as nats.js' KV writes it (the `KV-Operation` header; a purge rolls the subject up), published
  // here because `kv.delete` and `kv.purge` drop the acknowledgement, whose sequence the marker's compaction needs.
  const remove = async (key: string, operation: 'DEL' | 'PURGE', previousSeq?: number): Promise<number> => {
    const encoded = bucket.encodeKey(key);
    bucket.validateKey(encoded);
    const header = headers();
    header.set('KV-Operation', operation);
    if (operation === 'PURGE') header.set('Nats-Rollup', 'sub');
    if (previousSeq !== undefined) header.set('Nats-Expected-Last-Subject-Sequence', String(previousSeq));
    return (await bucket.js.publish(bucket.subjectForKey(encoded, true), Empty, { headers: header })).seq;
  };
  const encode = (value: LeaseValue): Uint8Array => codec.encode({ node: value.node, active: value.active } satisfies LeaseValue);
  const decode = (bytes: Uint8Array): LeaseValue | undefined => {
    try {
      const value = codec.decode(bytes) as Partial<LeaseValue> | undefined;
      if (value && typeof value.node === 'string') return { node: value.node, active: value.active === true };
    } catch (err) {
      deps.logger.warn({ err }, 'unreadable lease');
    }
    return undefined;
  };
  return {
    create: (key, value) => withTimeout(kv.create(key, encode(value)), bound, `lease create ${key}`),
    get: (key) => withTimeout(kv.get(key), bound, `lease read ${key}`),
    update: (key, value, revision) => withTimeout(kv.update(key, encode(value), revision), bound, `lease update ${key}`),
    delete: (key, previousSeq) => withTimeout(remove(key, 'DEL', previousSeq), bound, `lease delete ${key}`),
    purge: (key) => withTimeout(remove(key, 'PURGE'), bound, `lease purge ${key}`),
    decode,
    valueOf: (entry) => (entry && entry.operation === 'PUT' ? decode(entry.value) : undefined),
  };
}
