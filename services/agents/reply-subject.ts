/** nats.js' default inbox prefix (`nats req`), under which the protocol's callers also make theirs (`_INBOX.agents`). */
const CALLER_INBOX = '_INBOX';
/** The reply prefix of a request that came in through a service import (a caller in another account). */
const IMPORT_REPLY = '_R_';
const LITERAL_TOKEN = /^[^\s*>.\u0000-\u001f\u007f]+$/;

/**
 * Whether the agent host may answer on a reply subject. Its user may publish to any reply subject a request hands it
 * (`allow_responses`), so a caller could name another's pending reply (`_INBOX_runtime.…`) and have the host write
 * chunks there. It answers only under `_INBOX.` (the callers' inboxes: no agentbus service makes its replies there),
 * `_R_.` and the prefixes an operator trusts (`AGENTBUS_TRUSTED_INBOXES`). Pure.
 */
export function isCallerReply(reply: string | undefined, trusted: readonly string[] = []): reply is string {
  if (reply === undefined || reply.length === 0 || reply.length > 512) return false;
  if (!reply.split('.').every((token) => LITERAL_TOKEN.test(token))) return false;
  return [CALLER_INBOX, IMPORT_REPLY, ...trusted].some((prefix) => reply.startsWith(`${prefix}.`));
}
