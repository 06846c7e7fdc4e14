// What the commands that serve tools on the bus (`agentbus worker`, `agentbus mcp`) share: their flags and their wait.
import type { NatsConnection } from '@nats-io/nats-core';
import { UsageError } from './context.ts';

/** A `$SRV` service name (the NATS services API allows these characters). */
const SERVICE_NAME = /^[A-Za-z0-9_-]{1,64}$/;

/** `--name` of a command that serves tools: undefined, or a `$SRV` service name; anything else is a usage error. */
export function serviceNameFlag(value: string | undefined): string | undefined {
  if (value !== undefined && !SERVICE_NAME.test(value)) {
    throw new UsageError(`--name must match [A-Za-z0-9_-]{1,64}, got ${JSON.stringify(value)}`);
  }
  return value;
}

/** `--concurrency` of a command that serves tools: undefined, or a positive whole number; anything else is a usage error. */
export function concurrencyFlag(value: string | undefined): number | undefined {
  if (value === undefined) return undefined;
  const concurrency = Number(value);
  if (!Number.isInteger(concurrency) || concurrency < 1) {
    throw new UsageError(`--concurrency must be a positive whole number, got ${JSON.stringify(value)}`);
  }
  return concurrency;
}

/**
 * Waits until a serving command should stop: `signal` aborts (SIGINT/SIGTERM: `{ closed: false }`) or the connection
 * closes under it (`{ closed: true, error }`, with the error it closed with, if any).
 */
export async function untilStopped(nc: NatsConnection, signal: AbortSignal): Promise<{ closed: boolean; error?: Error }> {
  const error = await new Promise<Error | void>((resolve) => {
    if (signal.aborted) return resolve();
    signal.addEventListener('abort', () => resolve(), { once: true });
    void nc.closed().then(resolve);
  });
  return nc.isClosed() ? { closed: true, ...(error ? { error } : {}) } : { closed: false };
}
