import { createHash } from 'node:crypto';
import type { NatsConnection } from '@nats-io/nats-core';
import { jetstream } from '@nats-io/jetstream';
import { Kvm } from '@nats-io/kv';
import type { KV } from '@nats-io/kv';
import { z } from 'zod';
import { AgentbusError, ErrorCode, InvalidInputError } from '../errors.ts';
import type { Logger } from '../logging.ts';
import { ContentType, isToken, streamNames, toolCallReplySchema } from '../protocol/index.ts';
import type { Codec, ToolCallReply } from '../protocol/index.ts';
import { withTimeout } from '../with-timeout.ts';
import { abortPromise, request } from '../bus/request.ts';
import { createReplyMux } from '../bus/reply-mux.ts';
import type { ReplyMux } from '../bus/reply-mux.ts';

/** An outcome as the ledger keeps it: the reply of the attempt that ran, and when and where it ran. */
export interface LedgerEntry {
  readonly v: 1;
  readonly effectId: string;
  readonly tool: string;
  readonly reply: ToolCallReply;
  /** Epoch milliseconds the outcome was recorded. */
  readonly at: number;
  /** The `$SRV` id of the worker that ran the call. */
  readonly workerId?: string;
}

const entrySchema = z.object({
  v: z.literal(1),
  effectId: z.string(),
  tool: z.string(),
  reply: toolCallReplySchema,
  at: z.number(),
  workerId: z.string().optional(),
});

/** The outcomes of side-effecting and privileged calls, by tenant and `effectId`, in a JetStream KV bucket. */
export interface ResultLedger {
  /** The recorded outcome of a call, or undefined when none was recorded. Rejects when the bucket cannot be read. */
  lookup(scope: LedgerScope, effectId: string, options: { signal?: AbortSignal }): Promise<LedgerEntry | undefined>;
  /**
   * Records an outcome. The write is sent before this returns (a caller that then replies on the same connection
   * knows the server gets the record first: NATS keeps a connection's messages in order); the promise settles
   * with the server's acknowledgement, and rejects when the write was refused or not acknowledged in time.
   */
  record(scope: LedgerScope, entry: LedgerEntry, options: { signal?: AbortSignal }): Promise<void>;
}

/** Whose call an outcome is: its keys sit under the tenant and the session, so a session's delete purges them. */
export interface LedgerScope {
  readonly tenant: string;
  readonly sessionId: string;
}

/** Options of {@link createResultLedger}. */
export interface ResultLedgerOptions {
  readonly nc: NatsConnection;
  readonly codec: Codec;
  readonly logger: Logger;
  /** Subject prefix; the bucket is `streamNames(prefix).ledger` (`AGENTBUS_LEDGER`), made by the runtime. */
  readonly prefix: string;
  /** Bound of each bucket operation; default 2000 ms. */
  readonly timeoutMs?: number;
}

/**
 * The key of an outcome: `<tenant>.<sessionId>.<digest of effectId>` (an effectId may hold characters a key
 * cannot; a tenant's and a session's keys share a prefix that permissions or a purge can name).
 */
export function ledgerKey(scope: LedgerScope, effectId: string): string {
  if (!isToken(scope.tenant)) throw new InvalidInputError(`tenant must match [A-Za-z0-9_-]{1,64}, got ${JSON.stringify(scope.tenant)}`);
  if (!isToken(scope.sessionId)) throw new InvalidInputError(`sessionId must match [A-Za-z0-9_-]{1,64}, got ${JSON.stringify(scope.sessionId)}`);
  return `${scope.tenant}.${scope.sessionId}.${createHash('sha256').update(effectId).digest('base64url')}`;
}

/**
 * Creates the ledger client of a tool worker. The bucket is bound on first use without asking the server (a
 * worker may start before the runtime made it); an operation on a bucket that does not exist fails like any
 * other, and the worker goes on without its record.
 *
 * @example
 * const ledger = createResultLedger({ nc, codec, logger, prefix: 'agentbus' });
 * const recorded = await ledger.lookup({ tenant: 'acme', sessionId: 'chat-1' }, effectId, { signal });
 */
export function createResultLedger(options: ResultLedgerOptions): ResultLedger {
  const { nc, codec } = options;
  const timeoutMs = options.timeoutMs ?? 2_000;
  const bucket = streamNames(options.prefix).ledger;
  let opened: Promise<KV> | undefined;
  let replies: ReplyMux | undefined;
  // No `$JS.API.INFO` round trip at bind: the worker's user needs no more than the bucket's own subjects.
  const kv = () => (opened ??= new Kvm(jetstream(nc, { checkAPI: false, timeout: timeoutMs })).open(bucket, { allow_direct: true }));

  async function bounded<T>(operation: (bucket: KV) => Promise<T>, what: string, signal: AbortSignal | undefined): Promise<T> {
    signal?.throwIfAborted();
    const { promise: aborted, cleanup } = abortPromise(signal);
    try {
      return await withTimeout(Promise.race([kv().then(operation), aborted]), timeoutMs, `${what} the result ledger ${bucket}`);
    } finally {
      cleanup();
    }
  }

  return {
    async lookup(scope, effectId, { signal }) {
      const key = ledgerKey(scope, effectId);
      const entry = await bounded((bucket) => bucket.get(key), 'reading', signal);
      if (!entry || entry.operation !== 'PUT' || entry.length === 0) return undefined;
      const parsed = entrySchema.safeParse(codec.decode(entry.value));
      if (!parsed.success || parsed.data.effectId !== effectId) {
        options.logger.warn({ key, effectId }, 'ignored a malformed result ledger entry');
        return undefined;
      }
      return parsed.data;
    },
    record(scope, entry, { signal }) {
      // A plain publish to the key's subject, as a KV put is, made at once (a KV put would send it a microtask later).
      const key = ledgerKey(scope, entry.effectId);
      const acked = request(nc, `$KV.${bucket}.${key}`, codec.encode(entry), { timeoutMs, replies: (replies ??= createReplyMux(nc)), ...(signal ? { signal } : {}) });
      return acked.then((ack) => {
        const { error } = codec.decodeAs(ackSchema, ack.data, ContentType.json);
        if (error) throw new AgentbusError(ErrorCode.internal, `the result ledger ${bucket} refused an outcome: ${error.description ?? 'no reason given'} (${error.err_code ?? error.code ?? '?'})`);
      });
    },
  };
}

/** A JetStream publish acknowledgement: `{ stream, seq }`, or `{ error: { code, err_code, description } }`. */
const ackSchema = z.object({
  error: z.object({ code: z.number().optional(), err_code: z.number().optional(), description: z.string().optional() }).optional(),
});
