import { parseArgs } from 'node:util';
import type { AgentbusClient } from '../src/client/index.ts';
import type { Approve, CommandReply, InputAnswer } from '../src/protocol/index.ts';
import { UsageError } from './context.ts';
import type { CliContext } from './context.ts';
import { describeBusError, tokenArgument, withStackClient } from './stack-client.ts';

export const APPROVE_USAGE = 'agentbus approve <session> <toolCallId> [--deny] [--reason TEXT] [--args JSON | --respond TEXT] [--nats URL] [--tenant T]';
export const ANSWER_USAGE = 'agentbus answer <session> <toolCallId> <answer> [--json] [--request ID] [--nats URL] [--tenant T]';

interface Target {
  readonly nats: string | undefined;
  readonly tenant: string;
  readonly sessionId: string;
}

function positional(verb: string, positionals: readonly string[], count: number): void {
  if (positionals.length !== count) throw new UsageError(`${verb} needs ${count === 2 ? 'a session id and a tool call id' : 'a session id, a tool call id and the answer'}, got ${positionals.length} argument(s)`);
}

function jsonArgument(flag: string, text: string): unknown {
  try {
    return JSON.parse(text) as unknown;
  } catch (error) {
    throw new UsageError(`${flag} must be JSON: ${(error as Error).message}`);
  }
}

/** Parses `approve`: approve (default), `--deny`, approve with edited `--args JSON`, or `--respond TEXT` in the tool's place. */
export function parseApprove(argv: string[]): Target & { decision: Approve } {
  const { values, positionals } = parseArgs({
    args: argv,
    options: { nats: { type: 'string' }, tenant: { type: 'string' }, deny: { type: 'boolean', default: false }, reason: { type: 'string' }, args: { type: 'string' }, respond: { type: 'string' } },
    strict: true,
    allowPositionals: true,
  });
  positional('approve', positionals, 2);
  if (values.respond !== undefined && (values.deny || values.args !== undefined)) throw new UsageError('--respond answers in the tool\'s place: it goes with neither --deny nor --args');
  if (values.deny && values.args !== undefined) throw new UsageError('--args approves the call with those arguments: it does not go with --deny');
  const toolCallId = positionals[1]!;
  const reason = values.reason === undefined ? {} : { reason: values.reason };
  let decision: Approve;
  if (values.respond !== undefined) decision = { toolCallId, respond: values.respond, ...reason };
  else if (values.args !== undefined) {
    const args = jsonArgument('--args', values.args);
    if (typeof args !== 'object' || args === null || Array.isArray(args)) throw new UsageError('--args must be a JSON object of arguments');
    decision = { toolCallId, approved: true, args: args as Record<string, unknown>, ...reason };
  } else decision = { toolCallId, approved: !values.deny, ...reason };
  return { nats: values.nats, tenant: tokenArgument('--tenant', values.tenant ?? 'default'), sessionId: tokenArgument('the session id', positionals[0]), decision };
}

/** Parses `answer`: the answer is text, or JSON with `--json`; `--request` names the question it answers. */
export function parseAnswer(argv: string[]): Target & { answer: InputAnswer } {
  const { values, positionals } = parseArgs({
    args: argv,
    options: { nats: { type: 'string' }, tenant: { type: 'string' }, json: { type: 'boolean', default: false }, request: { type: 'string' } },
    strict: true,
    allowPositionals: true,
  });
  positional('answer', positionals, 3);
  const text = positionals[2]!;
  const answer: InputAnswer = {
    toolCallId: positionals[1]!,
    answer: (values.json ? jsonArgument('the answer (--json)', text) : text) as InputAnswer['answer'],
    ...(values.request === undefined ? {} : { requestId: values.request }),
  };
  return { nats: values.nats, tenant: tokenArgument('--tenant', values.tenant ?? 'default'), sessionId: tokenArgument('the session id', positionals[0]), answer };
}

async function report(context: CliContext, target: Target, name: string, send: (client: AgentbusClient) => Promise<CommandReply>): Promise<number> {
  return withStackClient(context, target.nats, name, async (client) => {
    try {
      const reply = await send(client);
      if (reply.ok) {
        context.stdout.write(`ok${reply.turnId ? ` (turn ${reply.turnId})` : ''}\n`);
        return 0;
      }
      context.stderr.write(`agentbus: ${reply.error ? `${reply.error.code}: ${reply.error.message}` : 'refused'}\n`);
      return 1;
    } catch (error) {
      if (context.signal.aborted) return 130;
      context.stderr.write(`agentbus: ${describeBusError(error, 'runtime')}\n`);
      return 1;
    }
  });
}

/**
 * `agentbus approve`: decides on a privileged call that awaits approval (`approval.requested`). Exits 0 when the
 * runtime took the decision, 1 when it refused it (no such approval awaited; edited arguments that break the tool's
 * schema, after which the approval stays open) or did not answer, 2 on a usage error.
 */
export async function runApprove(argv: string[], context: CliContext): Promise<number> {
  const options = parseApprove(argv);
  return report(context, options, 'agentbus-approve', (client) => client.approve({ tenant: options.tenant, sessionId: options.sessionId }, options.decision, { signal: context.signal, timeoutMs: 30_000 }));
}

/** `agentbus answer`: answers a tool's open question (`tool.input_requested`). Exits as `approve` does. */
export async function runAnswer(argv: string[], context: CliContext): Promise<number> {
  const options = parseAnswer(argv);
  return report(context, options, 'agentbus-answer', (client) => client.input({ tenant: options.tenant, sessionId: options.sessionId }, options.answer, { signal: context.signal, timeoutMs: 30_000 }));
}
