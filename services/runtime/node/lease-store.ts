import type { KV, KvEntry } from '@nats-io/kv';
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
  /** Deletes the key if its last revision is `previousSeq`. */
  delete(key: string, previousSeq: number): Promise<void>;
  purge(key: string): Promise<void>;
  /** A stored lease's value; undefined (and a warning) when it cannot be read. */
  decode(bytes: Uint8Array): LeaseValue | undefined;
  /** The lease an entry holds: undefined for a missing entry, a delete or purge, or an unreadable value. */
  valueOf(entry: KvEntry | null): LeaseValue | undefined;
}

/** Creates the {@link LeaseStore} over a KV bucket, every operation bounded by `opTimeoutMs`. */
export function createLeaseStore(deps: { kv: KV; codec: Codec; logger: Logger; opTimeoutMs: number }): LeaseStore {
  const { kv, codec, opTimeoutMs: bound } = deps;
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
    delete: (key, previousSeq) => withTimeout(kv.delete(key, { previousSeq }), bound, `lease delete ${key}`),
    purge: (key) => withTimeout(kv.purge(key), bound, `lease purge ${key}`),
    decode,
    valueOf: (entry) => (entry && entry.operation === 'PUT' ? decode(entry.value) : undefined),
  };
}
