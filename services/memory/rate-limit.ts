import { AgentbusError, ErrorCode } from '../../src/errors.ts';
import { createRateLimiter } from '../../src/rate-limit.ts';
import type { Rate } from '../../src/rate-limit.ts';

/** Requests per second of one tenant to memory, by default: far above what its turns and tools ask, far below a flood. */
export const DEFAULT_MEMORY_TENANT_RATE: Rate = { perSecond: 500, burst: 1_000 };

/** Memory's request rate per tenant (`AGENTBUS_MEMORY_TENANT_RATE`). */
export interface MemoryRateLimit {
  /** Takes one request of the tenant; throws a retryable `rate_limited` error when the tenant asks too fast. */
  admit(tenant: string): void;
}

/**
 * A token bucket per tenant over every memory request it makes (search, sessions list, history, state): a tenant past
 * its rate is refused, the others go on. Each memory instance keeps its own buckets, so with N instances in the queue
 * group a tenant gets up to N times the rate.
 *
 * @example
 * const limit = createMemoryRateLimit({ perSecond: 50, burst: 100 }, () => Date.now());
 * limit.admit('acme'); // throws rate_limited past 100 at once
 */
export function createMemoryRateLimit(rate: Rate, now: () => number): MemoryRateLimit {
  const buckets = createRateLimiter(rate, now);
  return {
    admit(tenant) {
      if (buckets.take(tenant)) return;
      throw new AgentbusError(ErrorCode.rateLimited, `tenant ${tenant} asks memory more than ${rate.perSecond} times per second (bursts of ${rate.burst}, AGENTBUS_MEMORY_TENANT_RATE); slow down and retry`, {
        retryable: true,
      });
    },
  };
}
