import type { NatsConnection } from '@nats-io/nats-core';

/** The parts of nats.js' protocol handler (`nc.protocol`, not public API) that {@link coalesceWrites} uses. */
interface ProtocolHandler {
  flushPending(): void;
  close(error?: Error): Promise<void>;
  readonly outbound: { size(): number };
  readonly pendingLimit: number;
  [COALESCED]?: true;
  [FLUSH_NOW]?: () => void;
}

const COALESCED = Symbol('agentbus.coalescedWrites');
const FLUSH_NOW = Symbol('agentbus.flushNow');

/**
 * Makes the connection write to its socket once per turn of the event loop (in `setImmediate`) instead of once per
 * microtask checkpoint. nats.js buffers what is published and writes the buffer a microtask after the first
 * command; a busy node publishes from many async chains that each reach their publish in later microtasks, so
 * that is many small socket writes (a runtime under 200 concurrent sessions spent ~15% of its CPU in them). Here
 * everything published while the loop handles one batch of I/O goes out as one write. Order is unchanged (one
 * buffer), a buffer past nats.js' own threshold (32 KiB) is still written at once, and closing writes what is
 * buffered first. Returns false (and changes nothing) when the connection does not have the shape this relies
 * on, e.g. after a nats.js upgrade that changed its internals.
 *
 * @example
 * coalesceWrites(nc); // once, right after connecting
 */
export function coalesceWrites(nc: NatsConnection): boolean {
  const protocol = (nc as unknown as { protocol?: Partial<ProtocolHandler> }).protocol;
  if (!protocol || typeof protocol.flushPending !== 'function' || typeof protocol.close !== 'function') return false;
  if (typeof protocol.pendingLimit !== 'number' || typeof protocol.outbound?.size !== 'function') return false;
  const handler = protocol as ProtocolHandler;
  if (handler[COALESCED]) return true;
  handler[COALESCED] = true;
  const flushNow = handler.flushPending.bind(handler);
  const close = handler.close.bind(handler);
  handler[FLUSH_NOW] = flushNow;
  let scheduled = false;
  const flushScheduled = () => {
    scheduled = false;
    flushNow();
  };
  handler.flushPending = () => {
    if (handler.outbound.size() >= handler.pendingLimit) {
      flushNow();
      return;
    }
    if (scheduled) return;
    scheduled = true;
    setImmediate(flushScheduled);
  };
  handler.close = (error) => {
    flushNow();
    return close(error);
  };
  return true;
}

/**
 * Writes what the connection has buffered now, instead of at the end of the event loop's turn ({@link coalesceWrites}):
 * for a message whose latency matters more than a write saved, such as the first chunk of a stream, which would
 * otherwise wait for the rest of the answer produced in the same turn. A connection whose writes are not coalesced
 * writes a microtask later anyway: nothing is done then.
 */
export function flushWrites(nc: NatsConnection): void {
  const protocol = (nc as unknown as { protocol?: Partial<ProtocolHandler> }).protocol;
  protocol?.[FLUSH_NOW]?.();
}
