import { JetStreamApiCodes, JetStreamApiError, jetstreamManager } from '@nats-io/jetstream';
import type { NatsConnection } from '@nats-io/nats-core';
import type { Logger } from '../../src/logging.ts';

/** What memory needs to know of a stream before following it. */
export interface StreamStart {
  readonly lastSeq: number;
  /** When the stream was made: a snapshot of another stream of the same name (made anew) is not this one's. */
  readonly created: string;
}

/**
 * A stream's last sequence and creation time, waiting (every `pollMs`, default 250) while the stream does not exist
 * yet: the runtime creates the log and the tombstones bucket, and memory, which may only read them, can start first
 * (`agentbus up` starts them together). `what` names the stream in the one log line said while waiting.
 */
export async function streamOnceThere(nc: NatsConnection, stream: string, options: { logger: Logger; what: string; pollMs?: number; signal?: AbortSignal }): Promise<StreamStart> {
  const jsm = await jetstreamManager(nc);
  for (let attempt = 0; ; attempt++) {
    options.signal?.throwIfAborted();
    try {
      const info = await jsm.streams.info(stream);
      return { lastSeq: info.state.last_seq, created: info.created };
    } catch (err) {
      if (!(err instanceof JetStreamApiError && err.code === JetStreamApiCodes.StreamNotFound)) throw err;
      if (attempt === 0) options.logger.info({ stream }, `waiting for ${options.what} to exist (a runtime creates it)`);
      await new Promise((resolve) => setTimeout(resolve, options.pollMs ?? 250));
    }
  }
}
