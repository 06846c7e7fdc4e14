import { AgentbusError, ErrorCode } from '../../src/errors.ts';
import { TurnEndReason } from '../../src/protocol/index.ts';
import { AgentStatus } from './wire.ts';
import type { AgentFailure } from './wire.ts';
import { BadPromptRequestError } from './request-envelope.ts';

// How agentbus outcomes become the §9.2 codes; the table is in docs/protocol.md ("Synadia Agent Protocol"). Pure.

/** A turn that ended other than `yielded`, as an error of the response stream. */
export function turnEndFailure(reason: TurnEndReason, error?: { readonly code?: string; readonly message?: string }): AgentFailure | undefined {
  switch (reason) {
    case TurnEndReason.yielded:
      return undefined;
    case TurnEndReason.cancelled:
      return { status: AgentStatus.conflict, error: 'turn_cancelled', message: error?.message ?? 'the turn was cancelled' };
    case TurnEndReason.budgetExceeded:
      return { status: AgentStatus.tooManyRequests, error: 'budget_exceeded', message: error?.message ?? 'the turn ran out of steps or cost budget' };
    case TurnEndReason.timeout:
      return { status: AgentStatus.internal, error: 'turn_timeout', message: error?.message ?? 'the turn timed out' };
    default:
      return { status: AgentStatus.internal, error: 'turn_failed', message: error?.message ?? 'the turn failed' };
  }
}

const STATUS_OF_CODE: Readonly<Record<string, AgentStatus>> = {
  [ErrorCode.invalidInput]: AgentStatus.badRequest,
  [ErrorCode.payloadTooLarge]: AgentStatus.badRequest,
  [ErrorCode.denied]: AgentStatus.forbidden,
  [ErrorCode.notFound]: AgentStatus.notFound,
  [ErrorCode.sessionDeleted]: AgentStatus.notFound,
  [ErrorCode.conflict]: AgentStatus.conflict,
  [ErrorCode.busy]: AgentStatus.conflict,
  [ErrorCode.cancelled]: AgentStatus.conflict,
  [ErrorCode.rateLimited]: AgentStatus.tooManyRequests,
  [ErrorCode.budgetExceeded]: AgentStatus.tooManyRequests,
  [ErrorCode.spendLimitExceeded]: AgentStatus.tooManyRequests,
};

/** Anything thrown while a prompt ran, as an error of the response stream: agentbus codes mapped, the rest 500. */
export function thrownFailure(error: unknown): AgentFailure {
  if (error instanceof BadPromptRequestError) return { status: AgentStatus.badRequest, error: 'bad_request', message: error.message };
  if (error instanceof AgentbusError) {
    return { status: STATUS_OF_CODE[error.code] ?? AgentStatus.internal, error: error.code, message: error.message };
  }
  return { status: AgentStatus.internal, error: 'internal', message: error instanceof Error ? error.message : String(error) };
}
