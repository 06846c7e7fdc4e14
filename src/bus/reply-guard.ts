import type { ConnectionOptions, NatsConnection } from '@nats-io/nats-core';
import { ErrorCode, InvalidInputError } from '../errors.ts';
import { DEFAULT_PREFIX, prefixFromEnv } from '../protocol/index.ts';
import type { Refusal, RefusalLog } from '../refusal-log.ts';
import { DEFAULT_INBOX_PREFIX, ServiceInboxPrefix, inboxPrefixOf, userInboxPrefix } from './inbox.ts';

/**
 * Inbox prefixes answered on every subject: the services' own ({@link ServiceInboxPrefix}) and those the shipped
 * config gives to the `client` user (the CLI of a single-tenant deployment) and the `operator` user.
 */
export const TRUSTED_INBOX_PREFIXES: readonly string[] = [...Object.values(ServiceInboxPrefix), '_INBOX_client', '_INBOX_operator'];

/**
 * The reply prefix nats-server puts on a request that came into the services' account through a service import
 * (a tenant in an account of its own): the server routes the answer back into the requester's account, so it
 * cannot land on a subject of the services'.
 */
export const SERVICE_IMPORT_REPLY_PREFIX = '_R_';

/** The variable that lists inbox prefixes to answer beside the built-in ones, comma-separated. */
export const TRUSTED_INBOXES_ENV = 'AGENTBUS_TRUSTED_INBOXES';

/** The longest reply subject answered; inboxes and `_R_` replies are far shorter. */
const MAX_REPLY_CHARS = 512;
/** How much of a refused subject a log line shows. */
const LOGGED_SUBJECT_CHARS = 200;

/** Where a responder may send its answers: decided once per process from its own connection (see {@link replyPolicyFromBus}). */
export interface ReplyPolicy {
  /**
   * The deployment runs without per-user permissions (the service connected without a user name: no auth, or only a
   * token): nats.js' default `_INBOX.` is answered too, since every connection there makes its replies under it.
   */
  readonly open: boolean;
  /**
   * Inbox prefixes answered beside the built-in ones, without their trailing dot: the service's own when it is not
   * a built-in one, and those an operator lists in `AGENTBUS_TRUSTED_INBOXES` (custom app users).
   */
  readonly trusted: readonly string[];
}

/** A request, as the guard sees it. */
export interface ReplyRequest {
  /** The reply subject; a request without one is never answered, so it passes. */
  readonly reply?: string | undefined;
  /**
   * The tenant of the subject the request came on (`<prefix>.<t>.…`): its own inbox `_INBOX_<t>.` is answered.
   * Undefined for the subjects of no tenant (provider, tools, hooks, `$SRV`, `agentbus.memory.rebuild`).
   */
  readonly tenant?: string | undefined;
}

/** The guard's answer: whether the reply subject may be answered, and if not why. */
export type ReplyVerdict = { readonly allowed: true } | { readonly allowed: false; readonly reason: string };

const ALLOWED: ReplyVerdict = { allowed: true };
// A reply subject is one literal subject: tokens of printable characters, none empty, no wildcard.
const LITERAL_TOKEN = /^[^\s*>.\u0000-\u001f\u007f]+$/;

function isLiteralSubject(subject: string): boolean {
  return subject.length > 0 && subject.split('.').every((token) => LITERAL_TOKEN.test(token));
}

/**
 * Decides whether a responder may answer a request's reply subject. NATS does not check a reply subject against
 * the requester's permissions: answering every one would let a tenant have a service publish, with the service's
 * grants, onto the state bucket, a session log or the leases (`$KV.AGENTBUS_STATE.globex.k` as the reply of
 * acme's `state.load`). Allowed: under `_INBOX_<tenant>.` for a tenant's subject; under a service's, the client's
 * or the operator's inbox; under `_R_.` (a service import's reply); under a prefix of `policy.trusted`; and under
 * `_INBOX.` only when `policy.open`. Pure: no I/O.
 *
 * @example
 * checkReply({ open: false, trusted: [] }, { tenant: 'acme', reply: '$KV.AGENTBUS_STATE.globex.k' }); // { allowed: false, reason: … }
 * checkReply({ open: false, trusted: [] }, { tenant: 'acme', reply: '_INBOX_acme.Hc4x.1' }); // { allowed: true }
 */
export function checkReply(policy: ReplyPolicy, request: ReplyRequest): ReplyVerdict {
  const { reply, tenant } = request;
  if (reply === undefined || reply === '') return ALLOWED;
  if (reply.length > MAX_REPLY_CHARS) return { allowed: false, reason: `reply subject is longer than ${MAX_REPLY_CHARS} characters` };
  if (!isLiteralSubject(reply)) return { allowed: false, reason: 'reply subject is not one literal subject (an empty token, a wildcard or a space)' };
  const tenantInbox = tenant === undefined ? undefined : userInboxPrefix(tenant);
  // The literal check above guarantees a non-empty token after the prefix's dot. Checked in place, per request:
  // every responder runs this on every message, so no list is built here.
  const under = (prefix: string) => reply.startsWith(prefix) && reply.charCodeAt(prefix.length) === 0x2e;
  if (
    (tenantInbox !== undefined && under(tenantInbox)) ||
    TRUSTED_INBOX_PREFIXES.some(under) ||
    under(SERVICE_IMPORT_REPLY_PREFIX) ||
    policy.trusted.some(under) ||
    (policy.open && under(DEFAULT_INBOX_PREFIX))
  ) {
    return ALLOWED;
  }
  const expected = tenantInbox ? `${tenantInbox}. (the tenant's inbox)` : 'a service inbox';
  return { allowed: false, reason: `reply subject is under no inbox the requester may own: expected ${expected}, or a prefix of ${TRUSTED_INBOXES_ENV}` };
}

/** Options of {@link parseTrustedInboxes}. */
export interface TrustedInboxesOptions {
  /** The bus's subject prefix (`AGENTBUS_PREFIX`, default `agentbus`): no inbox may lie under it. */
  readonly subjectPrefix?: string;
}

/**
 * The inbox prefixes of `AGENTBUS_TRUSTED_INBOXES`: comma-separated, each a literal subject prefix such as
 * `_INBOX_myapp` (a trailing `.` or `.>` is dropped). Throws {@link InvalidInputError} for one that is no literal
 * prefix, lies under `$` (JetStream, key-value, object store and system subjects) or under the bus's own prefix,
 * or is nats.js' shared `_INBOX`.
 *
 * @example
 * parseTrustedInboxes('_INBOX_billing, _INBOX_crm.>'); // ['_INBOX_billing', '_INBOX_crm']
 */
export function parseTrustedInboxes(value: string | undefined, options: TrustedInboxesOptions = {}): string[] {
  const subjectPrefix = options.subjectPrefix ?? DEFAULT_PREFIX;
  const prefixes: string[] = [];
  for (const raw of (value ?? '').split(',')) {
    const entry = raw.trim().replace(/\.>$/, '').replace(/\.$/, '');
    if (raw.trim() === '') continue;
    const problem =
      !isLiteralSubject(entry)
        ? 'is not a literal subject prefix'
        : entry.startsWith('$')
          ? 'lies under $ (JetStream, key-value, object store and system subjects)'
          : entry === subjectPrefix || entry.startsWith(`${subjectPrefix}.`)
            ? `lies under the bus prefix ${subjectPrefix}`
            : entry === DEFAULT_INBOX_PREFIX
              ? 'is the shared _INBOX, answered only in a deployment without users'
              : undefined;
    if (problem) throw new InvalidInputError(`${TRUSTED_INBOXES_ENV}: ${JSON.stringify(raw.trim())} ${problem}`);
    if (!prefixes.includes(entry)) prefixes.push(entry);
  }
  return prefixes;
}

/** What {@link replyPolicyFromBus} reads of a service's bus options (`busOptionsFromEnv`, `connectBus`). */
export interface ReplyPolicyBusOptions {
  readonly user?: string | undefined;
  readonly inboxPrefix?: string | undefined;
  readonly tls?: { readonly certFile?: string | undefined } | undefined;
}

function policyOf(named: boolean, inboxPrefix: string | undefined, trusted: readonly string[]): ReplyPolicy {
  // The service's own inbox (its `$SRV` probe answers there) when AGENTBUS_INBOX_PREFIX made it a custom one.
  const own = inboxPrefix && inboxPrefix !== DEFAULT_INBOX_PREFIX && !TRUSTED_INBOX_PREFIXES.includes(inboxPrefix) ? [inboxPrefix] : [];
  return { open: !named, trusted: [...new Set([...own, ...trusted])] };
}

/**
 * The reply policy of a service, from the bus options its `main.ts` connects with and its environment: open when it
 * connects without a user name and without a client certificate (no per-user permissions to protect), else sealed;
 * trusting its own inbox prefix and the prefixes of `AGENTBUS_TRUSTED_INBOXES`.
 *
 * @example
 * const bus = busOptionsFromEnv(process.env, ServiceInboxPrefix.memory);
 * const replyPolicy = replyPolicyFromBus(bus, process.env);
 */
export function replyPolicyFromBus(bus: ReplyPolicyBusOptions, env: NodeJS.ProcessEnv): ReplyPolicy {
  const trusted = parseTrustedInboxes(env[TRUSTED_INBOXES_ENV], { subjectPrefix: prefixFromEnv(env) });
  return policyOf(Boolean(bus.user) || Boolean(bus.tls?.certFile), bus.inboxPrefix, trusted);
}

/**
 * The reply policy a responder uses when its host passes none: the same rule as {@link replyPolicyFromBus}, read
 * from the connection's own options, with no operator-listed prefixes.
 */
export function replyPolicyOf(nc: NatsConnection): ReplyPolicy {
  // nats.js keeps the connect options on the connection object (see inboxPrefixOf).
  const options = (nc as NatsConnection & { readonly options?: ConnectionOptions }).options;
  const certificate = options?.tls ? Boolean(options.tls.certFile || options.tls.cert) : false;
  return policyOf(Boolean(options?.user) || certificate, inboxPrefixOf(nc), []);
}

/** A responder's check before it answers; see {@link createReplyGuard}. */
export interface ReplyGuard {
  readonly policy: ReplyPolicy;
  /**
   * Whether a request may be handled and answered: true when it has no reply subject or one {@link checkReply}
   * allows; false otherwise, after counting one refusal in the refusal log. A refused request must be dropped
   * whole: not handled, not answered, not counted in stats.
   */
  admits(message: { readonly subject: string; readonly reply?: string | undefined }, tenant?: string): boolean;
}

/** Options of {@link createReplyGuard}. */
export interface ReplyGuardOptions {
  readonly policy: ReplyPolicy;
  /** Where refusals go: the responder's own bounded refusal log (`createRefusalLog`). */
  readonly refusals: Pick<RefusalLog, 'refused'>;
}

const cut = (text: string) => (text.length > LOGGED_SUBJECT_CHARS ? `${text.slice(0, LOGGED_SUBJECT_CHARS)}…` : text);

/**
 * A reply guard for one responder: {@link checkReply} with its policy, refusals logged through its refusal log
 * (bounded: a flood of deputy requests is a few lines).
 *
 * @example
 * const replies = createReplyGuard({ policy: options.replyPolicy ?? replyPolicyOf(nc), refusals });
 * if (!replies.admits(message, tenant)) return;
 */
export function createReplyGuard(options: ReplyGuardOptions): ReplyGuard {
  const { policy, refusals } = options;
  return {
    policy,
    admits(message, tenant) {
      const verdict = checkReply(policy, { reply: message.reply, tenant });
      if (verdict.allowed) return true;
      const refusal: Refusal = {
        code: ErrorCode.denied,
        message: verdict.reason,
        subject: cut(message.subject),
        reply: cut(message.reply ?? ''),
        ...(tenant === undefined ? {} : { tenant: cut(tenant) }),
      };
      refusals.refused(refusal);
      return false;
    },
  };
}
