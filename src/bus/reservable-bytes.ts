import { JetStreamApiError } from '@nats-io/jetstream';
import type { Logger } from '../logging.ts';

/** JetStream's error code when the server (or account) cannot reserve a stream's `max_bytes`. */
const INSUFFICIENT_RESOURCES = 10047;

/** The smallest default a stream is shrunk to before giving up. */
const FLOOR_BYTES = 64 * 1024 * 1024;

/** True for JetStream's "insufficient storage resources available" (a stream's max_bytes it cannot reserve). */
export function isInsufficientResources(error: unknown): boolean {
  if (!(error instanceof Error)) return false;
  if (error instanceof JetStreamApiError && error.code === INSUFFICIENT_RESOURCES) return true;
  return /insufficient (storage |memory )?resources/i.test(error.message);
}

/** Options of {@link withReservableBytes}. */
export interface ReservableBytesOptions {
  /** The `max_bytes` wanted. */
  readonly wanted: number;
  /**
   * True when the operator set the figure: then a server that cannot reserve it is an error naming `variable`;
   * false for a default, which is halved (down to 64 MiB) until the server can reserve it, said at warn.
   */
  readonly explicit: boolean;
  /** The setting's variable, e.g. `AGENTBUS_LOG_MAX_BYTES`. */
  readonly variable: string;
  /** What is being made, for messages: `the log stream AGENTBUS_LOG`. */
  readonly what: string;
  /** The smallest figure that is acceptable (e.g. what an existing stream already holds); default 64 MiB. */
  readonly floor?: number;
  /**
   * What a default falls back to when nothing down to the floor fits, instead of failing: an existing stream's present
   * `max_bytes`, which the server has reserved already.
   */
  readonly fallback?: number;
  readonly logger?: Logger;
}

/**
 * Makes or updates a stream with a `max_bytes` its server can reserve. nats-server reserves a stream's `max_bytes`
 * out of its JetStream store (`max_file_store`, by default 75% of the disk that was free when it started; memory
 * streams out of `max_memory_store`) and refuses a stream that does not fit: a fixed default would stop a stack on a
 * small disk from starting at all. Returns the figure used.
 *
 * @example
 * const maxBytes = await withReservableBytes({ wanted: 10 * 1024 ** 3, explicit: false, variable: 'AGENTBUS_LOG_MAX_BYTES', what: 'the log' },
 *   (bytes) => jsm.streams.add({ ...config, max_bytes: bytes }));
 */
export async function withReservableBytes(options: ReservableBytesOptions, attempt: (maxBytes: number) => Promise<unknown>): Promise<number> {
  const floor = Math.max(options.floor ?? FLOOR_BYTES, 1);
  let maxBytes = options.wanted;
  for (;;) {
    try {
      await attempt(maxBytes);
      if (maxBytes !== options.wanted) {
        options.logger?.warn(
          { wanted: options.wanted, maxBytes, variable: options.variable },
          `the NATS server cannot reserve the default max_bytes of ${options.what}; it got the most that fits (set ${options.variable}, or give JetStream more room with max_file_store / max_memory_store)`,
        );
      }
      return maxBytes;
    } catch (error) {
      if (maxBytes <= 0 || !isInsufficientResources(error)) throw error;
      const next = Math.floor(maxBytes / 2);
      if (!options.explicit && options.fallback !== undefined && maxBytes !== options.fallback && next < floor) {
        maxBytes = options.fallback;
        continue;
      }
      if (options.explicit || next < floor) {
        throw new Error(
          `the NATS server cannot reserve ${maxBytes} bytes for ${options.what} (${options.variable}${options.explicit ? '' : ', default'}): lower ${options.variable} or give JetStream more room (max_file_store / max_memory_store)`,
          { cause: error },
        );
      }
      maxBytes = next;
    }
  }
}
