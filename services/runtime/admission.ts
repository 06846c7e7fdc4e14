import { ErrorCode } from '../../src/errors.ts';
import type { ErrorData } from '../../src/errors.ts';

/** A rate: `perSecond` on average, `burst` at once. 0 per second is no limit. */
export interface Rate {
  readonly perSecond: number;
  readonly burst: number;
}

/** Limits on what a tenant and a session may send. */
export interface AdmissionLimits {
  /** Most UTF-8 bytes of a prompt's text; 0 is no limit beyond the codec's 1 MiB per message. */
  readonly maxPromptBytes: number;
  /** Messages per second of one session (every verb counts). */
  readonly sessionRate: Rate;
  /** Messages per second of one tenant, over all its sessions. */
  readonly tenantRate: Rate;
}

/** Default limits: generous for people and programs, tight enough to stop a flood from taking a node. */
export const DEFAULT_ADMISSION_LIMITS: AdmissionLimits = {
  maxPromptBytes: 256 * 1024,
  sessionRate: { perSecond: 20, burst: 40 },
  tenantRate: { perSecond: 2_000, burst: 4_000 },
};

/** Decides whether a message is admitted: the first limit it breaks, or undefined. */
export interface Admission {
  /** Takes one message of the tenant from its bucket; refused when the tenant sends too fast. */
  tenant(tenant: string): ErrorData | undefined;
  /** Takes one message of the session from its bucket; refused when the session sends too fast. */
  session(tenant: string, sessionId: string): ErrorData | undefined;
  /** Refuses a prompt whose text is over the size limit. */
  promptSize(bytes: number): ErrorData | undefined;
  /** Drops the buckets that have refilled: a quiet session or tenant costs no memory here. */
  prune(): void;
}

/** Keys kept at most; refilled ones are dropped first, so a flood of new session ids cannot grow memory. */
const MAX_KEYS = 50_000;

/**
 * Rates per tenant and per session (the generic cell rate algorithm: one number per key, the time at which its
 * bucket would be full again, in whole ms since the admission was made, so a small integer), and the prompt
 * size limit. Pure but for the clock it is given.
 *
 * @example
 * const admission = createAdmission(DEFAULT_ADMISSION_LIMITS, () => Date.now());
 * const refused = admission.tenant('acme') ?? admission.session('acme', 's1');
 */
export function createAdmission(limits: AdmissionLimits, now: () => number): Admission {
  const epoch = now();
  const tenants = new Map<string, number>();
  const sessions = new Map<string, number>();
  const clock = () => Math.floor(now() - epoch);

  const take = (full: Map<string, number>, key: string, rate: Rate): boolean => {
    if (rate.perSecond <= 0) return true;
    const time = clock();
    const interval = 1000 / rate.perSecond;
    const known = full.get(key);
    if (known === undefined && full.size >= MAX_KEYS) prune(full, time);
    const at = Math.max(known ?? time, time);
    // Room for one more when the bucket is not `burst` messages behind.
    if (at + interval - time > rate.burst * interval) return false;
    full.set(key, Math.ceil(at + interval));
    return true;
  };
  const rateLimited = (what: string, rate: Rate): ErrorData => ({
    code: ErrorCode.rateLimited,
    message: `${what} sends more than ${rate.perSecond} messages per second (bursts of ${rate.burst}); slow down and retry`,
    retryable: true,
  });

  return {
    tenant(tenant) {
      return take(tenants, tenant, limits.tenantRate) ? undefined : rateLimited(`tenant ${tenant}`, limits.tenantRate);
    },
    session(tenant, sessionId) {
      return take(sessions, `${tenant}.${sessionId}`, limits.sessionRate) ? undefined : rateLimited(`session ${tenant}/${sessionId}`, limits.sessionRate);
    },
    prune() {
      const time = clock();
      dropFull(tenants, time);
      dropFull(sessions, time);
    },
    promptSize(bytes) {
      if (limits.maxPromptBytes <= 0 || bytes <= limits.maxPromptBytes) return undefined;
      return { code: ErrorCode.payloadTooLarge, message: `prompt of ${bytes} bytes exceeds the limit of ${limits.maxPromptBytes} bytes`, retryable: false };
    },
  };
}

/** Drops the keys whose bucket is full by now: their owners went quiet, and an unknown key starts full. */
function dropFull(full: Map<string, number>, time: number): void {
  for (const [key, at] of full) if (at <= time) full.delete(key);
}

/** Drops the full buckets; the oldest half of the keys when none is full. */
function prune(full: Map<string, number>, time: number): void {
  dropFull(full, time);
  if (full.size < MAX_KEYS) return;
  let drop = full.size / 2;
  for (const key of full.keys()) {
    if (drop-- <= 0) break;
    full.delete(key);
  }
}
