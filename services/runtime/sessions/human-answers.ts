import { ErrorCode, LogEventType } from '../../../src/protocol/index.ts';
import type { Approve, ErrorData, EventDataMap, InputAnswer, LogEvent } from '../../../src/protocol/index.ts';
import type { ApprovalDecision } from '../../../machines/index.ts';
import type { ToolInfo } from '../ports.ts';
import type { AppendFn } from './session-writer.ts';
import { jsonSchemaProblems } from '../tools/json-schema-check.ts';

/** A decision or answer refused (nothing logged: the request stays open), or what was logged and goes to the turn. */
export type HumanOutcome<T> = { readonly refused: ErrorData } | { readonly accepted: T };

function refused(code: string, message: string): { refused: ErrorData } {
  return { refused: { code, message, retryable: false } };
}

const ofCall = (event: LogEvent, type: LogEventType, toolCallId: string) => event.type === type && 'toolCallId' in event.data && event.data.toolCallId === toolCallId;

/**
 * Logs a decision on the open `approval.requested` of `decision.toolCallId` in `turnEvents` (a turn's events, in log
 * order) and returns it as the turn takes it. Refused, with nothing logged, when no approval of that call is awaited
 * (`not_found`), or when edited `args` do not match the tool's JSON Schema `parameters` (`invalid_arguments`; the
 * approval stays open). `toolOf` finds the tool as its workers announced it.
 */
export async function decideApproval(
  turnEvents: readonly LogEvent[],
  decision: Approve,
  toolOf: (name: string) => Promise<ToolInfo | undefined>,
  append: AppendFn,
  turnId: string,
): Promise<HumanOutcome<ApprovalDecision>> {
  const { toolCallId } = decision;
  // The newest request of this id: models that reuse ids (`call_0` in every step) have one approved per step.
  const at = turnEvents.findLastIndex((event) => ofCall(event, LogEventType.approvalRequested, toolCallId));
  const requested = at >= 0 ? turnEvents[at] : undefined;
  if (!requested || requested.type !== LogEventType.approvalRequested || turnEvents.slice(at + 1).some((event) => ofCall(event, LogEventType.approvalDecided, toolCallId))) {
    return refused(ErrorCode.notFound, `no approval is awaited for tool call ${toolCallId}`);
  }
  if (decision.args !== undefined) {
    const tool = await toolOf(requested.data.name);
    if (!tool) return refused(ErrorCode.unknownTool, `no live worker serves ${requested.data.name}: edited arguments cannot be checked; the approval stays open`);
    const problems = jsonSchemaProblems(tool.parameters, decision.args);
    if (problems) return refused(ErrorCode.invalidArguments, `edited arguments do not match the parameters of ${tool.name}: ${problems}; the approval stays open`);
  }
  const logged: ApprovalDecision = {
    approved: decision.respond === undefined && decision.approved === true,
    ...(decision.reason === undefined ? {} : { reason: decision.reason }),
    ...(decision.args === undefined ? {} : { args: decision.args }),
    ...(decision.respond === undefined ? {} : { respond: decision.respond }),
  };
  await append(LogEventType.approvalDecided, requested.step === undefined ? { turnId } : { turnId, step: requested.step }, { toolCallId, ...logged });
  return { accepted: logged };
}

/**
 * Logs the answer to the open `tool.input_requested` of `answer.toolCallId` and returns the request it answers.
 * Refused, with nothing logged, when no question of that call is open (`not_found`; `requestId`, when given, must be
 * the open one's), when its deadline passed (`timeout`), or when the answer does not match the request's JSON Schema
 * (`invalid_input`; the question stays open).
 */
export async function answerInput(
  turnEvents: readonly LogEvent[],
  answer: InputAnswer,
  now: number,
  append: AppendFn,
  turnId: string,
): Promise<HumanOutcome<{ readonly requestId: string }>> {
  const { toolCallId } = answer;
  const at = turnEvents.findLastIndex((event) => ofCall(event, LogEventType.toolInputRequested, toolCallId));
  const requested = at >= 0 ? turnEvents[at] : undefined;
  const closed = turnEvents
    .slice(at + 1)
    .some((event) => ofCall(event, LogEventType.toolInputAnswered, toolCallId) || ofCall(event, LogEventType.toolResult, toolCallId));
  if (!requested || requested.type !== LogEventType.toolInputRequested || closed || (answer.requestId !== undefined && answer.requestId !== requested.data.requestId)) {
    return refused(ErrorCode.notFound, `no question is open for tool call ${toolCallId}${answer.requestId === undefined ? '' : ` (request ${answer.requestId})`}`);
  }
  const request: EventDataMap['tool.input_requested'] = requested.data;
  if (now >= request.deadline) return refused(ErrorCode.timeout, `the question ${request.requestId} of tool call ${toolCallId} was not answered before its deadline`);
  if (request.schema) {
    const problems = jsonSchemaProblems(request.schema, answer.answer);
    if (problems) return refused(ErrorCode.invalidInput, `the answer does not match the question's schema: ${problems}; the question stays open`);
  }
  const where = requested.step === undefined ? { turnId } : { turnId, step: requested.step };
  await append(LogEventType.toolInputAnswered, where, { toolCallId, requestId: request.requestId, answer: answer.answer });
  return { accepted: { requestId: request.requestId } };
}
