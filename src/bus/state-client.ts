import type { NatsConnection } from '@nats-io/nats-core';
import { z } from 'zod';
import { fromErrorData } from '../errors.ts';
import { contentTypeOf, createStateSubjects } from '../protocol/index.ts';
import type { Codec, StateLoadReply, StateVerb } from '../protocol/index.ts';
import { createReplyMux } from './reply-mux.ts';
import type { ReplyMux } from './reply-mux.ts';
import { request } from './request.ts';

/** Per-call options: a timeout (default the client's, 5 s) and an AbortSignal. */
export interface StateCallOptions {
  readonly timeoutMs?: number;
  readonly signal?: AbortSignal;
}

/** One tenant's agent state on the bus (`agentbus.<t>.state.*`, served by the memory service). */
export interface StateClient {
  /** Stores `value` (any msgpack or JSON value, at most 256 KiB encoded); `expectedRevision` makes it a compare-and-set (0: only when unset). */
  save(key: string, value: unknown, options?: StateCallOptions & { expectedRevision?: number }): Promise<{ revision: number }>;
  /** The value under `key`, or `{ found: false }`. */
  load<T = unknown>(key: string, options?: StateCallOptions): Promise<StateLoadReply<T>>;
  delete(key: string, options?: StateCallOptions): Promise<void>;
}

/** Options of {@link createStateClient}. */
export interface StateClientOptions {
  readonly nc: NatsConnection;
  readonly codec: Codec;
  readonly tenant: string;
  readonly prefix?: string;
  readonly timeoutMs?: number;
  readonly replies?: ReplyMux;
}

const errorReply = z.object({ error: z.object({ code: z.string(), message: z.string(), retryable: z.boolean() }) });
const saveReply = z.object({ ok: z.literal(true), revision: z.int().positive() });
const loadReply = z.union([
  z.object({ found: z.literal(true), value: z.unknown(), revision: z.int().positive(), updatedAt: z.number() }),
  z.object({ found: z.literal(false) }),
]);
const deleteReply = z.object({ ok: z.literal(true) });

/**
 * A client of one tenant's state. Rejects with the service's typed errors (`invalid_input` for a bad key,
 * `payload_too_large`, `conflict` for a lost compare-and-set), `TimeoutError`, `NoRespondersError` (no memory
 * service runs) or the signal's reason.
 *
 * @example
 * const state = createStateClient({ nc, codec, tenant: 'acme' });
 * await state.save('preferences/units', { metric: true });
 * const loaded = await state.load<{ metric: boolean }>('preferences/units');
 */
export function createStateClient(options: StateClientOptions): StateClient {
  const { nc, codec, tenant } = options;
  const subjects = createStateSubjects(options.prefix);
  const replies = options.replies ?? createReplyMux(nc);
  const ask = async <S extends z.ZodType>(verb: StateVerb, body: unknown, schema: S, callOptions: StateCallOptions): Promise<z.infer<S>> => {
    const subject = subjects.of(tenant, verb);
    const reply = await request(nc, subject, codec.encode(body), {
      timeoutMs: callOptions.timeoutMs ?? options.timeoutMs ?? 5_000,
      replies,
      ...(callOptions.signal ? { signal: callOptions.signal } : {}),
    });
    const value = codec.decode(reply.data, contentTypeOf(reply));
    const failure = errorReply.safeParse(value);
    if (failure.success) throw fromErrorData(failure.data.error);
    return codec.validate(schema, value, `reply of ${subject}`);
  };
  return {
    async save(key, value, callOptions = {}) {
      const { revision } = await ask('save', { key, value, ...(callOptions.expectedRevision === undefined ? {} : { expectedRevision: callOptions.expectedRevision }) }, saveReply, callOptions);
      return { revision };
    },
    load: async <T>(key: string, callOptions: StateCallOptions = {}) => (await ask('load', { key }, loadReply, callOptions)) as StateLoadReply<T>,
    async delete(key, callOptions = {}) {
      await ask('delete', { key }, deleteReply, callOptions);
    },
  };
}
