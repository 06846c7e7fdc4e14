import { parseArgs } from 'node:util';
import { AgentbusError, ErrorCode } from '../src/errors.ts';
import type { LogEvent } from '../src/protocol/index.ts';
import { UsageError } from './context.ts';
import type { CliContext } from './context.ts';
import { describeBusError, tokenArgument, withStackClient } from './stack-client.ts';
import { decisionWords } from './format.ts';

export const SHOW_USAGE = 'agentbus show <session> [--nats URL] [--tenant T] [--json]';

/** Parses and checks the flags of `show`. */
export function parseShow(argv: string[]): { nats: string | undefined; tenant: string; sessionId: string; json: boolean } {
  const { values, positionals } = parseArgs({
    args: argv,
    options: { nats: { type: 'string' }, tenant: { type: 'string' }, json: { type: 'boolean', default: false } },
    strict: true,
    allowPositionals: true,
  });
  if (positionals.length !== 1) throw new UsageError(`show needs exactly one session id, got ${positionals.length}`);
  return { nats: values.nats, tenant: tokenArgument('--tenant', values.tenant ?? 'default'), sessionId: tokenArgument('the session id', positionals[0]), json: values.json };
}

function oneLine(value: unknown, max = 200): string {
  const text = typeof value === 'string' ? value : JSON.stringify(value);
  const flat = (text ?? '').replace(/\s+/g, ' ').trim();
  return flat.length > max ? `${flat.slice(0, max - 1)}…` : flat;
}

/**
 * A logged event as a line of the conversation: what the user said, what the assistant answered, the tools it
 * called and what they gave back, and how each turn ended. Undefined for events that say nothing to a reader
 * (`session.created`).
 */
export function formatHistoryEvent(event: LogEvent): string | undefined {
  switch (event.type) {
    case 'session.created':
      return undefined;
    case 'session.forked':
      return `(forked from ${event.data.parentSessionId} at seq ${event.data.parentSeq}: the lines above are its history)`;
    case 'user.message':
      return `${event.data.steer ? 'user (steer)' : 'user'}: ${event.data.text}`;
    case 'assistant.message':
      return event.data.text ? `assistant: ${event.data.text}` : undefined;
    case 'tool.use':
      return `  → ${event.data.name} ${oneLine(event.data.args)}`;
    case 'tool.result':
      return `  ← ${event.data.name}${event.data.isError ? ` ERROR${event.data.error ? ` ${event.data.error.code}` : ''}` : ''}: ${oneLine(event.data.output)}`;
    case 'approval.requested':
      return `  ? ${event.data.name} awaits approval (tool call ${event.data.toolCallId})`;
    case 'approval.decided':
      return `  ${event.data.approved ? '✓' : '✗'} ${decisionWords(event.data)} ${event.data.toolCallId}${event.data.reason ? `: ${event.data.reason}` : ''}`;
    case 'tool.input_requested':
      return `  ? ${event.data.name} asks: ${event.data.question} (tool call ${event.data.toolCallId}, request ${event.data.requestId})`;
    case 'tool.input_answered':
      return `  ↳ answered ${event.data.toolCallId}: ${typeof event.data.answer === 'string' ? event.data.answer : JSON.stringify(event.data.answer)}`;
    case 'summary.created':
      return `(summary through seq ${event.data.throughSeq}: ${oneLine(event.data.text)})`;
    case 'turn.ended':
      return `— turn ${event.data.reason}${event.data.error ? ` (${event.data.error.code}: ${event.data.error.message})` : ''} after ${event.data.steps} step(s), $${event.data.cost.toFixed(6)}`;
  }
}

/**
 * `agentbus show`: prints a session's messages in log order, paging through its history (the memory service
 * reads it from the log). `--json` prints every logged event, with its `seq`, as a JSON line. Exits 0, 1 when
 * the session does not exist or was deleted, or memory does not answer.
 */
export async function runShow(argv: string[], context: CliContext): Promise<number> {
  const options = parseShow(argv);
  const target = { tenant: options.tenant, sessionId: options.sessionId };
  return withStackClient(context, options.nats, 'agentbus-show', async (client) => {
    let afterSeq: number | undefined;
    try {
      do {
        context.signal.throwIfAborted();
        const page = await client.history(target, afterSeq === undefined ? {} : { afterSeq }, { signal: context.signal, timeoutMs: 15_000 });
        for (const event of page.events) {
          const line = options.json ? JSON.stringify(event) : formatHistoryEvent(event);
          if (line !== undefined) context.stdout.write(`${line}\n`);
        }
        afterSeq = page.nextAfterSeq;
      } while (afterSeq !== undefined);
    } catch (error) {
      if (context.signal.aborted) return 130;
      const missing = error instanceof AgentbusError && (error.code === ErrorCode.notFound || error.code === ErrorCode.sessionDeleted);
      context.stderr.write(
        missing ? `agentbus: session ${target.tenant}/${target.sessionId} ${error.code === ErrorCode.sessionDeleted ? 'was deleted' : 'does not exist'}\n` : `agentbus: ${describeBusError(error, 'memory')}\n`,
      );
      return 1;
    }
    return 0;
  });
}
