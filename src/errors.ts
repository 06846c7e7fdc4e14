/** Error codes that cross the bus. */
export const ErrorCode = {
  invalidInput: 'invalid_input',
  payloadTooLarge: 'payload_too_large',
  unknownTool: 'unknown_tool',
  invalidArguments: 'invalid_arguments',
  toolFailed: 'tool_failed',
  timeout: 'timeout',
  cancelled: 'cancelled',
  noResponders: 'no_responders',
  providerError: 'provider_error',
  streamInterrupted: 'stream_interrupted',
  rateLimited: 'rate_limited',
  conflict: 'conflict',
  notFound: 'not_found',
  denied: 'denied',
  budgetExceeded: 'budget_exceeded',
  sessionDeleted: 'session_deleted',
  busy: 'busy',
  /** The callee cannot do this at all, as configured (e.g. a provider with no embedding model). */
  unsupported: 'unsupported',
  /**
   * A side-effecting call that was running when its runtime node died, and is not run again because its tool
   * is not idempotent: it may or may not have taken effect.
   */
  interrupted: 'interrupted',
  /** The worker running a call stopped sending heartbeats: it died, hangs or lost its connection. */
  workerLost: 'worker_lost',
  /**
   * A tool hook (a policy service on the bus) did not answer, answered late or malformed, or reported an error;
   * under the default failure mode the call is blocked with this code.
   */
  hookFailed: 'hook_failed',
  /**
   * What serves the tool is down for now (an MCP server that exited or lost its session, and is being restarted): the
   * call may or may not have taken effect; retryable once it is back.
   */
  unavailable: 'unavailable',
  /**
   * A storage limit of the deployment is reached: a tenant's state bytes, the state bucket, the session log's bytes or
   * one session's event count. Not retryable as it is: something must be deleted, or the operator raise the limit.
   */
  quotaExceeded: 'quota_exceeded',
  /** A turn ran past its deadline (the prompt's `deadlineMs`, or the runtime's `AGENTBUS_TURN_TIMEOUT_MS`). */
  deadlineExceeded: 'deadline_exceeded',
  /**
   * A tenant's spend limit (per day or per month, USD, `AGENTBUS_SPEND_LIMITS`) is used up: its prompts are refused and
   * its provider calls not made until the limit resets. Not retryable before then.
   */
  spendLimitExceeded: 'spend_limit_exceeded',
  /**
   * A turn whose prompt gave an `outputSchema` answered with text that is not JSON matching it, after one retry with
   * the validation error: the turn ends `failed` with this code, its text kept.
   */
  outputInvalid: 'output_invalid',
  /**
   * A tool's reply saying the call needs an answer from the user before it can go on (`inputRequest` names the
   * question): the runtime logs `tool.input_requested`, waits for the answer and makes the call again.
   */
  inputRequired: 'input_required',
  internal: 'internal',
} as const;
export type ErrorCode = (typeof ErrorCode)[keyof typeof ErrorCode];

/** An error as it travels on the bus. */
export interface ErrorData {
  readonly code: string;
  readonly message: string;
  readonly retryable: boolean;
}

interface AgentbusErrorOptions {
  readonly cause?: unknown;
  readonly retryable?: boolean;
}

/** Base of every agentbus error: a stable `code` and whether a retry may help. */
export class AgentbusError extends Error {
  readonly code: string;
  readonly retryable: boolean;
  constructor(code: string, message: string, options: AgentbusErrorOptions = {}) {
    super(message, options.cause === undefined ? undefined : { cause: options.cause });
    this.name = 'AgentbusError';
    this.code = code;
    this.retryable = options.retryable ?? false;
  }
}

/** Input that fails validation: malformed bytes, wrong shape, bad ids. */
export class InvalidInputError extends AgentbusError {
  constructor(message: string, options: AgentbusErrorOptions = {}) {
    super(ErrorCode.invalidInput, message, options);
    this.name = 'InvalidInputError';
  }
}

/** A payload over the configured size limit. */
export class PayloadTooLargeError extends AgentbusError {
  readonly size: number;
  readonly limit: number;
  constructor(size: number, limit: number) {
    super(ErrorCode.payloadTooLarge, `payload of ${size} bytes exceeds the limit of ${limit} bytes`);
    this.name = 'PayloadTooLargeError';
    this.size = size;
    this.limit = limit;
  }
}

/** A wait that ran out of time. */
export class TimeoutError extends AgentbusError {
  readonly subject: string | undefined;
  readonly timeoutMs: number;
  constructor(message: string, timeoutMs: number, subject?: string) {
    super(ErrorCode.timeout, message, { retryable: true });
    this.name = 'TimeoutError';
    this.subject = subject;
    this.timeoutMs = timeoutMs;
  }
}

/** Work stopped because its signal was aborted. */
export class CancelledError extends AgentbusError {
  constructor(message = 'cancelled', options: AgentbusErrorOptions = {}) {
    super(ErrorCode.cancelled, message, options);
    this.name = 'CancelledError';
  }
}

/** Nobody listens on a request subject. */
export class NoRespondersError extends AgentbusError {
  readonly subject: string;
  constructor(subject: string) {
    super(ErrorCode.noResponders, `no service answers on ${subject}`, { retryable: true });
    this.name = 'NoRespondersError';
    this.subject = subject;
  }
}

/** A session log append lost the single-writer race. */
export class LogConflictError extends AgentbusError {
  readonly sessionId: string;
  readonly expectedSeq: number;
  /** `holder`: the write was stopped before the log was asked, because this node lost the session's lease to it. */
  constructor(sessionId: string, expectedSeq: number, options: AgentbusErrorOptions & { holder?: string } = {}) {
    // Retryable: the node gives the session up on a conflict, and the next attempt opens it from the log.
    const { holder, ...rest } = options;
    const message =
      holder === undefined
        ? `session ${sessionId} log moved past sequence ${expectedSeq}: another writer`
        : `session ${sessionId} is held by ${holder || 'no node'} now: this node lost its lease and must not write its log`;
    super(ErrorCode.conflict, message, { retryable: true, ...rest });
    this.name = 'LogConflictError';
    this.sessionId = sessionId;
    this.expectedSeq = expectedSeq;
  }
}

/** A session that was deleted: its id is not taken again, and nothing of it can be read or sent to. */
export class SessionDeletedError extends AgentbusError {
  readonly tenant: string | undefined;
  readonly sessionId: string | undefined;
  constructor(message: string, options: AgentbusErrorOptions & { tenant?: string; sessionId?: string } = {}) {
    super(ErrorCode.sessionDeleted, message, options);
    this.name = 'SessionDeletedError';
    this.tenant = options.tenant;
    this.sessionId = options.sessionId;
  }
}

/** A session that cannot do this now (a turn runs, or it is being deleted); retryable once that is over. */
export class SessionBusyError extends AgentbusError {
  readonly tenant: string | undefined;
  readonly sessionId: string | undefined;
  constructor(message: string, options: AgentbusErrorOptions & { tenant?: string; sessionId?: string } = {}) {
    super(ErrorCode.busy, message, { retryable: true, ...options });
    this.name = 'SessionBusyError';
    this.tenant = options.tenant;
    this.sessionId = options.sessionId;
  }
}

/**
 * A storage limit reached (`quota_exceeded`): a tenant's state bytes, the state bucket, the session log's bytes or one
 * session's event count. `limit` is the figure in its unit (bytes or events), `tenant` whose it is when it is a
 * tenant's own.
 */
export class QuotaExceededError extends AgentbusError {
  readonly limit: number | undefined;
  readonly tenant: string | undefined;
  constructor(message: string, options: AgentbusErrorOptions & { limit?: number; tenant?: string } = {}) {
    super(ErrorCode.quotaExceeded, message, options);
    this.name = 'QuotaExceededError';
    this.limit = options.limit;
    this.tenant = options.tenant;
  }
}

/**
 * A tenant's spend limit is used up (`spend_limit_exceeded`): `period` says which (`day` or `month`), `limit` its
 * figure in USD, `spent` what the tenant spent in it, `resetsAt` when the period ends (epoch milliseconds, UTC).
 */
export class SpendLimitError extends AgentbusError {
  readonly tenant: string;
  readonly period: string;
  readonly limit: number;
  readonly spent: number;
  readonly resetsAt: number;
  constructor(message: string, options: AgentbusErrorOptions & { tenant: string; period: string; limit: number; spent: number; resetsAt: number }) {
    super(ErrorCode.spendLimitExceeded, message, options);
    this.name = 'SpendLimitError';
    this.tenant = options.tenant;
    this.period = options.period;
    this.limit = options.limit;
    this.spent = options.spent;
    this.resetsAt = options.resetsAt;
  }
}

/** A turn that ran past its deadline: what was in flight is cancelled, and the turn ends `deadline_exceeded`. */
export class DeadlineExceededError extends AgentbusError {
  /** The deadline, epoch milliseconds. */
  readonly deadline: number | undefined;
  constructor(message: string, options: AgentbusErrorOptions & { deadline?: number } = {}) {
    super(ErrorCode.deadlineExceeded, message, options);
    this.name = 'DeadlineExceededError';
    this.deadline = options.deadline;
  }
}

/** A tool call that failed; carries the tool call id. */
export class ToolError extends AgentbusError {
  readonly toolCallId: string | undefined;
  constructor(code: string, message: string, options: AgentbusErrorOptions & { toolCallId?: string } = {}) {
    super(code, message, options);
    this.name = 'ToolError';
    this.toolCallId = options.toolCallId;
  }
}

/** A tool call whose worker stopped sending heartbeats: it died, hangs, or lost its connection. Retryable. */
export class WorkerLostError extends AgentbusError {
  readonly subject: string;
  readonly silentMs: number;
  constructor(message: string, options: AgentbusErrorOptions & { subject: string; silentMs: number }) {
    super(ErrorCode.workerLost, message, { retryable: true, ...options });
    this.name = 'WorkerLostError';
    this.subject = options.subject;
    this.silentMs = options.silentMs;
  }
}

/**
 * An MCP server that cannot take a call now: it exited, its HTTP session broke, or it is being restarted. Retryable:
 * `agentbus mcp` restarts the server, and a call made again once it is back is served.
 */
export class McpUnavailableError extends ToolError {
  /** The MCP server, as `agentbus mcp` names it (its command or URL). */
  readonly server: string;
  constructor(server: string, message: string, options: AgentbusErrorOptions = {}) {
    super(ErrorCode.unavailable, message, { retryable: true, ...options });
    this.name = 'McpUnavailableError';
    this.server = server;
  }
}

/** A provider call that failed; `status` is the upstream HTTP status when there was one. */
export class ProviderError extends AgentbusError {
  readonly status: number | undefined;
  readonly provider: string | undefined;
  constructor(code: string, message: string, options: AgentbusErrorOptions & { status?: number; provider?: string } = {}) {
    super(code, message, options);
    this.name = 'ProviderError';
    this.status = options.status;
    this.provider = options.provider;
  }
}

/** Turns any thrown value into the data that crosses the bus. */
export function toErrorData(error: unknown): ErrorData {
  if (error instanceof AgentbusError) {
    return { code: error.code, message: error.message, retryable: error.retryable };
  }
  if (error instanceof Error && error.name === 'AbortError') {
    return { code: ErrorCode.cancelled, message: error.message || 'cancelled', retryable: false };
  }
  // AbortSignal.timeout() rejects with a DOMException named TimeoutError; treated as our TimeoutError, as abortReason does.
  if (error instanceof Error && error.name === 'TimeoutError') {
    return { code: ErrorCode.timeout, message: error.message || 'timeout', retryable: true };
  }
  if (error instanceof Error) return { code: ErrorCode.internal, message: error.message, retryable: false };
  return { code: ErrorCode.internal, message: String(error), retryable: false };
}

/** Rebuilds an error received from the bus as the matching class. */
export function fromErrorData(data: ErrorData): AgentbusError {
  switch (data.code) {
    case ErrorCode.invalidInput:
      return new InvalidInputError(data.message);
    case ErrorCode.cancelled:
      return new CancelledError(data.message);
    case ErrorCode.timeout:
      return new TimeoutError(data.message, 0);
    case ErrorCode.sessionDeleted:
      return new SessionDeletedError(data.message);
    case ErrorCode.busy:
      return new SessionBusyError(data.message, { retryable: data.retryable });
    case ErrorCode.quotaExceeded:
      return new QuotaExceededError(data.message, { retryable: data.retryable });
    case ErrorCode.deadlineExceeded:
      return new DeadlineExceededError(data.message);
    default:
      return new AgentbusError(data.code, data.message, { retryable: data.retryable });
  }
}

/** The reason of an aborted signal as an Error (AbortSignal.timeout gives a DOMException). */
export function abortReason(signal: AbortSignal): Error {
  const reason: unknown = signal.reason;
  if (reason instanceof AgentbusError) return reason;
  if (reason instanceof Error && reason.name === 'TimeoutError') return new TimeoutError(reason.message, 0);
  if (reason instanceof Error) return new CancelledError(reason.message, { cause: reason });
  return new CancelledError(reason === undefined ? 'cancelled' : String(reason));
}
