import { Kvm } from '@nats-io/kv';
import type { KV } from '@nats-io/kv';
import { jetstreamManager } from '@nats-io/jetstream';
import type { NatsConnection } from '@nats-io/nats-core';
import { AgentbusError, ErrorCode, PayloadTooLargeError, QuotaExceededError } from '../../src/errors.ts';
import type { Logger } from '../../src/logging.ts';
import { ContentType, MAX_STATE_VALUE_BYTES, streamNames } from '../../src/protocol/index.ts';
import type { Codec, StateDeleteReply, StateLoadReply, StateSaveReply, StateSaveRequest } from '../../src/protocol/index.ts';
import { isRevisionConflict } from '../../src/bus/revision-conflict.ts';
import { withReservableBytes } from '../../src/bus/reservable-bytes.ts';
import type { ReservableBytesOptions } from '../../src/bus/reservable-bytes.ts';
import { isPermissionDenied } from '../../src/bus/permission-denied.ts';
import { watchStateUsage } from './state-usage.ts';
import type { StateUsage } from './state-usage.ts';

/** The JetStream KV bucket that holds every tenant's agent state, keyed `<tenant>.<key>`. */
export const STATE_BUCKET = streamNames().state;

/** Limits of agent state: of the bucket, of one value and of one tenant's values together. */
export interface StateLimits {
  /** Most bytes of the whole bucket (`AGENTBUS_STATE_MAX_BYTES`, default 1 GiB; 0: none): past it every save is refused. */
  readonly bucketMaxBytes: number;
  /** Most bytes of one value, msgpack-encoded (`AGENTBUS_STATE_MAX_VALUE_BYTES`, default 256 KiB). */
  readonly maxValueBytes: number;
  /** Most bytes of one tenant's current values together (`AGENTBUS_STATE_TENANT_MAX_BYTES`, default 64 MiB; 0: none). */
  readonly tenantMaxBytes: number;
}

/** Defaults of {@link StateLimits}. */
export const DEFAULT_STATE_LIMITS: StateLimits = {
  bucketMaxBytes: 1024 ** 3,
  maxValueBytes: MAX_STATE_VALUE_BYTES,
  tenantMaxBytes: 64 * 1024 * 1024,
};

/** Room for a message's headers (an expected revision) beside a value of the most bytes. */
const HEADER_ROOM = 1024;

/** Per-tenant agent state (radkit's `MemoryService`): save, load and delete a value by key. */
export interface StateStore {
  save(tenant: string, request: StateSaveRequest): Promise<StateSaveReply>;
  load(tenant: string, key: string): Promise<StateLoadReply>;
  delete(tenant: string, key: string): Promise<StateDeleteReply>;
  /** Bytes of the tenant's current values, as this instance counts them. */
  usage(tenant: string): number;
  stop(): void;
}

/**
 * State on the KV bucket {@link STATE_BUCKET} (made when missing, one revision per key; an existing one gets the
 * limits too, unless it holds more than `bucketMaxBytes`, which the server would enforce by deleting values). The
 * tenant is a key prefix the caller never chooses: it comes from the subject a request arrived on. Values are stored
 * as msgpack, each at most `maxValueBytes`, a tenant's together at most `tenantMaxBytes` (`quota_exceeded` past it;
 * counted by {@link watchStateUsage}). A save with `expectedRevision` is a compare-and-set (0: only when the key has
 * no value), answered with `conflict` when another save came first.
 */
export async function openStateStore(options: {
  nc: NatsConnection;
  codec: Codec;
  logger: Logger;
  bucket?: string;
  replicas?: number;
  /** Those not given as in {@link DEFAULT_STATE_LIMITS}; a `bucketMaxBytes` given must fit the server's store. */
  limits?: Partial<StateLimits>;
}): Promise<StateStore> {
  const { codec, logger } = options;
  const limits: StateLimits = { ...DEFAULT_STATE_LIMITS, ...options.limits };
  const bucket = options.bucket ?? STATE_BUCKET;
  const reserve = {
    wanted: limits.bucketMaxBytes > 0 ? limits.bucketMaxBytes : -1,
    explicit: options.limits?.bucketMaxBytes !== undefined,
    variable: 'AGENTBUS_STATE_MAX_BYTES',
    what: `the state bucket ${bucket}`,
    logger,
  };
  let opened: KV | undefined;
  await withReservableBytes(reserve, async (maxBytes) => {
    opened = await new Kvm(options.nc).create(bucket, {
      history: 1,
      replicas: options.replicas ?? 1,
      description: 'agentbus: per-tenant agent state',
      max_bytes: maxBytes,
      maxValueSize: limits.maxValueBytes + HEADER_ROOM,
    });
  });
  if (!opened) throw new Error(`the state bucket ${bucket} was not opened`);
  const kv: KV = opened;
  await applyLimits(options.nc, bucket, limits, reserve);
  const usage: StateUsage = await watchStateUsage({ nc: options.nc, bucket, logger });
  await usage.ready;
  // Bytes of saves on their way, per tenant: two saves at once cannot both take the last room.
  const pending = new Map<string, number>();
  const keyOf = (tenant: string, key: string) => `${tenant}.${key}`;
  const conflict = (key: string, expected: number, cause: unknown) =>
    new AgentbusError(ErrorCode.conflict, `state ${key} is not at revision ${expected}${expected === 0 ? ' (it has a value)' : ''}: load it and save again`, { cause, retryable: true });

  const checkTenant = (tenant: string, stored: string, size: number) => {
    if (limits.tenantMaxBytes <= 0) return;
    const after = usage.bytes(tenant) + (pending.get(tenant) ?? 0) - usage.sizeOf(stored) + size;
    if (after > limits.tenantMaxBytes) {
      throw new QuotaExceededError(
        `tenant ${tenant}'s state would hold ${after} bytes, past its limit of ${limits.tenantMaxBytes} (AGENTBUS_STATE_TENANT_MAX_BYTES): delete keys or save less`,
        { limit: limits.tenantMaxBytes, tenant },
      );
    }
  };

  return {
    async save(tenant, { key, value, expectedRevision }) {
      const bytes = codec.encode(value ?? null);
      if (bytes.length > limits.maxValueBytes) throw new PayloadTooLargeError(bytes.length, limits.maxValueBytes);
      const stored = keyOf(tenant, key);
      checkTenant(tenant, stored, bytes.length);
      pending.set(tenant, (pending.get(tenant) ?? 0) + bytes.length);
      try {
        const revision = expectedRevision === undefined ? await kv.put(stored, bytes) : expectedRevision === 0 ? await kv.create(stored, bytes) : await kv.update(stored, bytes, expectedRevision);
        usage.stored(stored, bytes.length, revision);
        return { ok: true, revision };
      } catch (err) {
        if (expectedRevision !== undefined && (isRevisionConflict(err) || /exists/i.test(String((err as Error).message)))) throw conflict(key, expectedRevision, err);
        if (/maximum bytes exceeded/i.test(String((err as Error).message))) {
          throw new QuotaExceededError(`the state bucket is full (${limits.bucketMaxBytes} bytes, AGENTBUS_STATE_MAX_BYTES): delete keys, or the operator raises the limit`, {
            cause: err,
            limit: limits.bucketMaxBytes,
          });
        }
        throw err;
      } finally {
        const left = (pending.get(tenant) ?? 0) - bytes.length;
        if (left > 0) pending.set(tenant, left);
        else pending.delete(tenant);
      }
    },
    async load(tenant, key) {
      const entry = await kv.get(keyOf(tenant, key));
      if (!entry || entry.operation !== 'PUT') return { found: false };
      return { found: true, value: codec.decode(entry.value, ContentType.msgpack), revision: entry.revision, updatedAt: entry.created.getTime() };
    },
    async delete(tenant, key) {
      const stored = keyOf(tenant, key);
      await kv.delete(stored);
      usage.deleted(stored);
      return { ok: true };
    },
    usage: (tenant) => usage.bytes(tenant),
    stop: () => usage.stop(),
  };
}

/**
 * Gives a bucket made before these limits (or with others) the configured ones: nats.js leaves an existing bucket as
 * it is. A `max_bytes` below what the bucket holds is not applied (the server would delete values to meet it), nor is
 * anything when this user may not update the stream: both said at warn. A set `max_bytes` the server cannot reserve
 * is an error, as for a new bucket.
 */
async function applyLimits(nc: NatsConnection, bucket: string, limits: StateLimits, reserve: Omit<ReservableBytesOptions, 'floor' | 'fallback'> & { logger: Logger }): Promise<void> {
  const { logger } = reserve;
  const stream = `KV_${bucket}`;
  const jsm = await jetstreamManager(nc);
  const info = await jsm.streams.info(stream);
  const maxMsgSize = limits.maxValueBytes + HEADER_ROOM;
  let wanted = reserve.wanted;
  if (wanted > 0 && info.state.bytes > wanted) {
    logger.warn({ bucket, bytes: info.state.bytes, wanted }, 'the state bucket holds more than AGENTBUS_STATE_MAX_BYTES; its limit stays as it was (lowering it would delete values)');
    wanted = info.config.max_bytes;
  }
  if (info.config.max_bytes === wanted && info.config.max_msg_size === maxMsgSize) return;
  try {
    await withReservableBytes({ ...reserve, wanted, floor: Math.max(info.state.bytes, 64 * 1024 * 1024), fallback: info.config.max_bytes }, (maxBytes) =>
      jsm.streams.update(stream, { max_bytes: maxBytes, max_msg_size: maxMsgSize }),
    );
  } catch (err) {
    // Only a user without $JS.API.STREAM.UPDATE.<stream> goes on: a figure set that cannot be reserved stops memory.
    if (!isPermissionDenied(err)) throw err;
    logger.warn({ err, bucket }, 'this user may not update the state bucket ($JS.API.STREAM.UPDATE); it keeps the limits it has');
  }
}
