import { Kvm } from '@nats-io/kv';
import type { KV } from '@nats-io/kv';
import type { NatsConnection } from '@nats-io/nats-core';
import { AgentbusError, ErrorCode, PayloadTooLargeError } from '../../src/errors.ts';
import { ContentType, MAX_STATE_VALUE_BYTES, streamNames } from '../../src/protocol/index.ts';
import type { Codec, StateDeleteReply, StateLoadReply, StateSaveReply, StateSaveRequest } from '../../src/protocol/index.ts';
import { isRevisionConflict } from '../../src/bus/revision-conflict.ts';

/** The JetStream KV bucket that holds every tenant's agent state, keyed `<tenant>.<key>`. */
export const STATE_BUCKET = streamNames().state;

/** Per-tenant agent state (radkit's `MemoryService`): save, load and delete a value by key. */
export interface StateStore {
  save(tenant: string, request: StateSaveRequest): Promise<StateSaveReply>;
  load(tenant: string, key: string): Promise<StateLoadReply>;
  delete(tenant: string, key: string): Promise<StateDeleteReply>;
}

/**
 * State on the KV bucket {@link STATE_BUCKET} (made when missing, one revision per key). The tenant is a key
 * prefix the caller never chooses: it comes from the subject a request arrived on. Values are stored as msgpack,
 * at most {@link MAX_STATE_VALUE_BYTES}. A save with `expectedRevision` is a compare-and-set (0: only when the
 * key has no value), answered with `conflict` when another save came first.
 */
export async function openStateStore(options: { nc: NatsConnection; codec: Codec; bucket?: string; replicas?: number }): Promise<StateStore> {
  const { codec } = options;
  const kv: KV = await new Kvm(options.nc).create(options.bucket ?? STATE_BUCKET, { history: 1, replicas: options.replicas ?? 1, description: 'agentbus: per-tenant agent state' });
  const keyOf = (tenant: string, key: string) => `${tenant}.${key}`;
  const conflict = (key: string, expected: number, cause: unknown) =>
    new AgentbusError(ErrorCode.conflict, `state ${key} is not at revision ${expected}${expected === 0 ? ' (it has a value)' : ''}: load it and save again`, { cause, retryable: true });
  return {
    async save(tenant, { key, value, expectedRevision }) {
      const bytes = codec.encode(value ?? null);
      if (bytes.length > MAX_STATE_VALUE_BYTES) throw new PayloadTooLargeError(bytes.length, MAX_STATE_VALUE_BYTES);
      const stored = keyOf(tenant, key);
      try {
        const revision = expectedRevision === undefined ? await kv.put(stored, bytes) : expectedRevision === 0 ? await kv.create(stored, bytes) : await kv.update(stored, bytes, expectedRevision);
        return { ok: true, revision };
      } catch (err) {
        if (expectedRevision !== undefined && (isRevisionConflict(err) || /exists/i.test(String((err as Error).message)))) throw conflict(key, expectedRevision, err);
        throw err;
      }
    },
    async load(tenant, key) {
      const entry = await kv.get(keyOf(tenant, key));
      if (!entry || entry.operation !== 'PUT') return { found: false };
      return { found: true, value: codec.decode(entry.value, ContentType.msgpack), revision: entry.revision, updatedAt: entry.created.getTime() };
    },
    async delete(tenant, key) {
      await kv.delete(keyOf(tenant, key));
      return { ok: true };
    },
  };
}
