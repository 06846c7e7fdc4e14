import { setTimeout as sleep } from 'node:timers/promises';
import { abortReason } from '../../../src/errors.ts';
import { LogEventType } from '../../../src/protocol/index.ts';
import type { LogEvent } from '../../../src/protocol/index.ts';
import type { ApprovalDecision, HumanAnswer, RequestApprovalInput } from '../../../machines/index.ts';
import type { SessionServices } from '../turn/session-services.ts';

/** setTimeout's longest delay: a longer wait is taken in pieces. */
const MAX_TIMER_MS = 2 ** 31 - 1;

/** Waits until `deadline` (epoch ms by `now`), or rejects with the signal's reason when it aborts first. */
async function waitUntil(deadline: number, now: () => number, signal: AbortSignal): Promise<void> {
  for (let left = deadline - now(); left > 0; left = deadline - now()) {
    await sleep(Math.min(left, MAX_TIMER_MS), undefined, { signal }).catch((error: unknown) => {
      throw signal.aborted ? abortReason(signal) : error;
    });
  }
}

/** The events of the call's request in this step (models reuse ids across steps), newest request last. */
function stepEvents(services: SessionServices, input: RequestApprovalInput): LogEvent[] {
  return services.transcript
    .turnEvents(input.turnId)
    .filter((event) => (event.step === undefined || event.step === input.step) && 'toolCallId' in event.data && event.data.toolCallId === input.call.id);
}

function loggedDecision(data: Extract<LogEvent, { type: 'approval.decided' }>['data']): ApprovalDecision {
  const { toolCallId: _id, ...decision } = data;
  return decision;
}

/**
 * The wait of AwaitingApproval, as the turn's `requestApproval` actor. For a privileged call: appends
 * `approval.requested` with its `deadline` and `onTimeout` (once: a turn resumed on another node finds it and keeps
 * its deadline, not a fresh one), then waits; a client's decision (`approve`) reaches the turn as an APPROVAL event,
 * which stops this wait. At the deadline, under the writer's lock (so that it and a client's decision cannot both be
 * logged), the default decision is logged with `timedOut: true` and returned, unless a decision is in the log.
 * For a call suspended on a question (`call.asking`; its `tool.input_requested` logged by `executeTools`): waits
 * until that request's deadline, then returns the logged answer or `input_timeout`.
 */
export async function awaitHuman(services: SessionServices, input: RequestApprovalInput, signal: AbortSignal): Promise<HumanAnswer | void> {
  const { call } = input;
  const where = { turnId: input.turnId, step: input.step };
  const { asking } = call;
  if (asking) {
    const requested = stepEvents(services, input).findLast((event) => event.type === LogEventType.toolInputRequested && event.data.requestId === asking.requestId);
    const deadline = requested?.type === LogEventType.toolInputRequested ? requested.data.deadline : services.now() + services.config.approvalTimeoutMs;
    await waitUntil(deadline, services.now, signal);
    return services.writer.exclusive(async () => {
      const answered = stepEvents(services, input).findLast((event) => event.type === LogEventType.toolInputAnswered && event.data.requestId === asking.requestId);
      if (answered?.type === LogEventType.toolInputAnswered) return { kind: 'input' as const, requestId: asking.requestId, answer: answered.data.answer };
      return { kind: 'input_timeout' as const, requestId: asking.requestId };
    });
  }
  const events = stepEvents(services, input);
  const at = events.findLastIndex((event) => event.type === LogEventType.approvalRequested);
  const requested = events[at];
  let deadline: number;
  let onTimeout: 'deny' | 'approve';
  if (requested?.type === LogEventType.approvalRequested) {
    deadline = requested.data.deadline ?? services.now() + services.config.approvalTimeoutMs;
    onTimeout = requested.data.onTimeout ?? 'deny';
    const decided = events.slice(at + 1).findLast((event) => event.type === LogEventType.approvalDecided);
    if (decided?.type === LogEventType.approvalDecided) return { kind: 'approval', decision: loggedDecision(decided.data) };
  } else {
    deadline = services.now() + services.config.approvalTimeoutMs;
    onTimeout = services.config.approvalTimeoutDecision;
    await services.writer.append(LogEventType.approvalRequested, where, { toolCallId: call.id, name: call.name, args: call.args, deadline, onTimeout });
  }
  await waitUntil(deadline, services.now, signal);
  return services.writer.exclusive(async (append) => {
    const logged = stepEvents(services, input);
    const since = logged.findLastIndex((event) => event.type === LogEventType.approvalRequested);
    const decided = logged.slice(since + 1).findLast((event) => event.type === LogEventType.approvalDecided);
    if (decided?.type === LogEventType.approvalDecided) return { kind: 'approval' as const, decision: loggedDecision(decided.data) };
    const decision: ApprovalDecision = { approved: onTimeout === 'approve', reason: 'approval timed out', timedOut: true };
    await append(LogEventType.approvalDecided, where, { toolCallId: call.id, ...decision });
    return { kind: 'approval' as const, decision };
  });
}
