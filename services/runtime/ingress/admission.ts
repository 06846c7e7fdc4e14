import { ErrorCode } from '../../../src/errors.ts';
import type { ErrorData } from '../../../src/errors.ts';
import { createRateLimiter } from '../../../src/rate-limit.ts';
import type { Rate } from '../../../src/rate-limit.ts';

export type { Rate } from '../../../src/rate-limit.ts';

/** Limits on what a tenant and a session may send. */
export interface AdmissionLimits {
  /**
   * Most UTF-8 bytes of a prompt's text and attachments (names and contents) together ({@link promptBytes}); 0 is no
   * limit beyond the codec's 1 MiB per message.
   */
  readonly maxPromptBytes: number;
  /** Messages per second of one session (every verb counts). */
  readonly sessionRate: Rate;
  /** Messages per second of one tenant, over all its sessions. */
  readonly tenantRate: Rate;
}

/**
 * The UTF-8 bytes a prompt's size limit counts: its text and every attachment's name and content, which reach the
 * model as much as the text does.
 *
 * @example
 * promptBytes({ text: 'Review this', attachments: [{ name: 'a.ts', content: 'let x = 1;\n' }] }); // 11 + 4 + 11
 */
export function promptBytes(prompt: { readonly text: string; readonly attachments?: ReadonlyArray<{ readonly name: string; readonly content: string }> | undefined }): number {
  let bytes = Buffer.byteLength(prompt.text, 'utf8');
  for (const file of prompt.attachments ?? []) bytes += Buffer.byteLength(file.name, 'utf8') + Buffer.byteLength(file.content, 'utf8');
  return bytes;
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
  /** Refuses a prompt whose size ({@link promptBytes}) is over the limit. */
  promptSize(bytes: number): ErrorData | undefined;
  /** Drops the buckets that have refilled: a quiet session or tenant costs no memory here. */
  prune(): void;
}

/**
 * Rates per tenant and per session (token buckets of `src/rate-limit.ts`), and the prompt size limit. Pure but for
 * the clock it is given.
 *
 * @example
 * const admission = createAdmission(DEFAULT_ADMISSION_LIMITS, () => Date.now());
 * const refused = admission.tenant('acme') ?? admission.session('acme', 's1');
 */
export function createAdmission(limits: AdmissionLimits, now: () => number): Admission {
  const tenants = createRateLimiter(limits.tenantRate, now);
  const sessions = createRateLimiter(limits.sessionRate, now);
  const rateLimited = (what: string, rate: Rate): ErrorData => ({
    code: ErrorCode.rateLimited,
    message: `${what} sends more than ${rate.perSecond} messages per second (bursts of ${rate.burst}); slow down and retry`,
    retryable: true,
  });

  return {
    tenant(tenant) {
      return tenants.take(tenant) ? undefined : rateLimited(`tenant ${tenant}`, limits.tenantRate);
    },
    session(tenant, sessionId) {
      return sessions.take(`${tenant}.${sessionId}`) ? undefined : rateLimited(`session ${tenant}/${sessionId}`, limits.sessionRate);
    },
    prune() {
      tenants.prune();
      sessions.prune();
    },
    promptSize(bytes) {
      if (limits.maxPromptBytes <= 0 || bytes <= limits.maxPromptBytes) return undefined;
      return { code: ErrorCode.payloadTooLarge, message: `prompt of ${bytes} bytes (text and attachments) exceeds the limit of ${limits.maxPromptBytes} bytes (AGENTBUS_MAX_PROMPT_BYTES)`, retryable: false };
    },
  };
}
