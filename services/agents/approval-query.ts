import type { Approve } from '../../src/protocol/index.ts';

// How an approval the runtime awaits becomes a §7 `query` to the prompt's caller, and the caller's reply a decision.
// Pure: the host sends the query and the client SDK the decision.

/** What `approval.requested` says of the call awaiting a decision. */
export interface ApprovalRequest {
  readonly toolCallId: string;
  readonly name: string;
  readonly args: unknown;
  readonly argsRedacted?: boolean;
}

/** Longest arguments shown in a query; the rest is cut with a note. */
const MAX_ARGS_SHOWN = 2_000;

/** Replies that approve (trimmed, any case, a trailing full stop or exclamation mark allowed); every other reply denies. */
const APPROVING = new Set(['yes', 'y', 'approve', 'approved', 'allow', 'ok']);
const DENYING = new Set(['no', 'n', 'deny', 'denied']);

/**
 * The question a caller is asked for one call: the tool, its arguments as the log shows them (secrets scrubbed), and
 * how to answer.
 *
 * @example
 * approvalQuestion({ toolCallId: 'c1', name: 'run_command', args: { command: ['ls'] } });
 * // 'Approve the call of tool run_command with arguments {"command":["ls"]}? Answer yes or no (any other answer denies it and is passed on as the reason).'
 */
export function approvalQuestion(request: ApprovalRequest): string {
  let args = JSON.stringify(request.args ?? {}) ?? 'null';
  if (args.length > MAX_ARGS_SHOWN) args = `${args.slice(0, MAX_ARGS_SHOWN)}… (${args.length} characters in all)`;
  const redacted = request.argsRedacted ? ' (secrets in them are hidden here)' : '';
  return `Approve the call of tool ${request.name} with arguments ${args}${redacted}? Answer yes or no (any other answer denies it and is passed on as the reason).`;
}

/**
 * The decision a caller's reply makes: yes-words approve, no-words deny, any other text denies with that text as the
 * reason, and no reply (undefined) denies as unanswered.
 */
export function approvalDecision(toolCallId: string, reply: string | undefined, unanswered: string): Approve {
  if (reply === undefined) return { toolCallId, approved: false, reason: unanswered };
  const word = reply.trim().toLowerCase().replace(/[.!]+$/, '');
  if (APPROVING.has(word)) return { toolCallId, approved: true, reason: 'approved by the caller of the agent protocol' };
  if (DENYING.has(word)) return { toolCallId, approved: false, reason: 'denied by the caller of the agent protocol' };
  return { toolCallId, approved: false, reason: `the caller answered: ${reply.trim().slice(0, 2_000)}` };
}
