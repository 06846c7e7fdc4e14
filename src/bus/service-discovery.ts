import type { Msg, NatsConnection } from '@nats-io/nats-core';
import { NoRespondersError, abortReason } from '../errors.ts';
import type { Logger } from '../logging.ts';
import { ContentType, createCodec } from '../protocol/index.ts';
import type { Codec } from '../protocol/index.ts';
import { abortPromise, isNoResponders, translateRequestError } from './request.ts';
import { ServiceVerb, serviceInfoSchema, serviceSubject } from './service-info.ts';
import type { ServiceInfo } from './service-info.ts';

/** Options of {@link discoverServices}. */
export interface DiscoverOptions {
  /** Longest wait for the first answer (`stall`) or for all answers (`timer`). */
  readonly timeoutMs: number;
  readonly signal?: AbortSignal;
  /**
   * `stall` (default) stops once no answer came for `stallMs` after the last one: quick when services
   * answer. `timer` always waits `timeoutMs`.
   */
  readonly strategy?: 'stall' | 'timer';
  /** Silence after an answer that ends a `stall` wait; default 150 ms. */
  readonly stallMs?: number;
  /** Decodes the answers; a fresh codec when not given. */
  readonly codec?: Codec;
  /** Where malformed answers are reported. */
  readonly logger?: Logger;
}

const DEFAULT_STALL_MS = 150;

/**
 * Asks `$SRV.INFO.<name>` (or `$SRV.INFO` for every service when `name` is undefined) and returns the
 * info of every instance that answered. No service at all gives an empty list. Malformed answers are
 * skipped and logged. Rejects with the signal's reason on abort.
 *
 * @example
 * const instances = await discoverServices(nc, 'agentbus-tools', { timeoutMs: 1000, signal });
 * const endpoints = instances.flatMap((instance) => instance.endpoints);
 */
export async function discoverServices(nc: NatsConnection, name: string | undefined, options: DiscoverOptions): Promise<ServiceInfo[]> {
  options.signal?.throwIfAborted();
  const codec = options.codec ?? createCodec();
  const subject = serviceSubject(ServiceVerb.info, name);
  const { promise: aborted, cleanup } = abortPromise(options.signal);
  const found: ServiceInfo[] = [];
  let iterator: AsyncIterator<Msg> | undefined;
  try {
    const replies = await Promise.race([
      nc.requestMany(subject, new Uint8Array(), {
        strategy: options.strategy ?? 'stall',
        maxWait: options.timeoutMs,
        stall: options.stallMs ?? DEFAULT_STALL_MS,
      }),
      aborted,
    ]);
    iterator = replies[Symbol.asyncIterator]();
    while (true) {
      const next = await Promise.race([iterator.next(), aborted]);
      if (next.done) break;
      const message = next.value;
      if (isNoResponders(message)) break;
      try {
        found.push(codec.validate(serviceInfoSchema, codec.decode(message.data, ContentType.json), 'service info'));
      } catch (err) {
        options.logger?.warn({ err, subject }, 'skipped a malformed service info answer');
      }
    }
    return found;
  } catch (error) {
    if (options.signal?.aborted) throw abortReason(options.signal);
    if (translateRequestError(error, subject, options.timeoutMs) instanceof NoRespondersError) return found;
    throw error;
  } finally {
    cleanup();
    if (options.signal?.aborted) void iterator?.return?.();
  }
}
