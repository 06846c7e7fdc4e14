import { headers as createHeaders } from '@nats-io/nats-core';
import type { MsgHdrs } from '@nats-io/nats-core';

// The wire of the Synadia Agent Protocol 0.3 (synadia-ai/synadia-agent-sdk-docs, core-protocol.md): names, subjects,
// chunk shapes and status codes. Pure: no I/O.

/** The protocol version this host speaks, as `metadata.protocol_version` carries it (MAJOR.MINOR, §3.2, §11). */
export const AGENT_PROTOCOL_VERSION = '0.3';

/** The micro service name every agent registers (§3.1), and the queue group of its endpoints (§3.3, §8.7). */
export const AGENTS_SERVICE = 'agents';
export const AGENTS_QUEUE_GROUP = 'agents';

/**
 * Where the replies to this host's `query` chunks come (§7.1 lets the agent choose): under the host's own inbox
 * prefix, so the host's user already subscribes there, while callers may publish only under `.query` (the shipped
 * config's `agents-caller`), never into the host's other inboxes.
 */
export const QUERY_REPLY_PREFIX = '_INBOX_agents.query';

/** The verbs of §2: endpoint names and the first token after `agents`. `hb` is published, not served. */
export const AgentVerb = {
  prompt: 'prompt',
  status: 'status',
  heartbeat: 'hb',
} as const;
export type AgentVerb = (typeof AgentVerb)[keyof typeof AgentVerb];

/** Who an agent is on the bus: the three tokens after the verb (§2), `{agent}.{owner}.{name}`. */
export interface AgentIdentity {
  readonly agent: string;
  readonly owner: string;
  readonly name: string;
}

/** `agents.{verb}.{agent}.{owner}.{name}` (§2). */
export function agentSubject(verb: AgentVerb, identity: AgentIdentity): string {
  return `${AGENTS_SERVICE}.${verb}.${identity.agent}.${identity.owner}.${identity.name}`;
}

/** The status codes of §9.2; agents MUST use no other. */
export const AgentStatus = {
  badRequest: 400,
  unauthorized: 401,
  forbidden: 403,
  notFound: 404,
  conflict: 409,
  tooManyRequests: 429,
  internal: 500,
} as const;
export type AgentStatus = (typeof AgentStatus)[keyof typeof AgentStatus];

/** The NATS micro error headers (§9.1). */
export const ServiceErrorHeader = {
  code: 'Nats-Service-Error-Code',
  text: 'Nats-Service-Error',
} as const;

/** A failure as the error message of a response stream carries it: a §9.2 code, a snake_case error, a message. */
export interface AgentFailure {
  readonly status: AgentStatus;
  readonly error: string;
  readonly message: string;
}

const encoder = new TextEncoder();

/** The leading `ack` (§6.4): the first message of every response stream that passed decoding. */
export const ACK_CHUNK: Uint8Array = encoder.encode(JSON.stringify({ type: 'status', data: 'ack' }));

/** The end of every response stream (§6.5): zero bytes, and no headers. */
export const TERMINATOR: Uint8Array = new Uint8Array(0);

/** A `response` chunk in its short form, `{"type":"response","data":"<text>"}` (§6.3). */
export function responseChunk(text: string): Uint8Array {
  return encoder.encode(JSON.stringify({ type: 'response', data: text }));
}

/** A `query` chunk (§7.1): the caller answers it with one message (plain text or an envelope) on `replySubject`. */
export function queryChunk(id: string, replySubject: string, prompt: string): Uint8Array {
  return encoder.encode(JSON.stringify({ type: 'query', data: { id, reply_subject: replySubject, prompt } }));
}

/** Header values are one line: newlines (and other control characters) become spaces. */
export function singleLine(text: string): string {
  return text.replace(/[\u0000-\u001f\u007f]+/g, ' ').trim();
}

/** The error message of §9: both headers, and the JSON body `{"error","message"}`. */
export function errorMessage(failure: AgentFailure): { readonly data: Uint8Array; readonly headers: MsgHdrs } {
  const headers = createHeaders();
  headers.set(ServiceErrorHeader.code, String(failure.status));
  headers.set(ServiceErrorHeader.text, singleLine(failure.message) || failure.error);
  return { data: encoder.encode(JSON.stringify({ error: failure.error, message: failure.message })), headers };
}

/** A byte count as `max_payload` metadata says it (§2.1: units B, KB, MB, GB; 1 KB = 1024 B, as NATS counts). */
export function formatPayloadSize(bytes: number): string {
  for (const [unit, size] of [['GB', 1024 ** 3], ['MB', 1024 ** 2], ['KB', 1024]] as const) {
    if (bytes >= size && bytes % size === 0) return `${bytes / size}${unit}`;
  }
  return `${bytes}B`;
}

/** Reads a `max_payload` string (`"1MB"`, `"512KB"`, `"900B"`, `"2GB"`); undefined when it is none. */
export function parsePayloadSize(text: string): number | undefined {
  const match = /^\s*(\d+)\s*(B|KB|MB|GB)\s*$/i.exec(text);
  if (!match) return undefined;
  const unit = match[2]!.toUpperCase();
  const size = unit === 'GB' ? 1024 ** 3 : unit === 'MB' ? 1024 ** 2 : unit === 'KB' ? 1024 : 1;
  return Number(match[1]) * size;
}
