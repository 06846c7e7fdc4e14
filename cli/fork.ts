import { parseArgs } from 'node:util';
import { AgentbusError, ErrorCode } from '../src/errors.ts';
import { UsageError } from './context.ts';
import type { CliContext } from './context.ts';
import { describeBusError, tokenArgument, withStackClient } from './stack-client.ts';

export const FORK_USAGE = 'agentbus fork <session> [--at SEQ] [--as NEW_SESSION] [--nats URL] [--tenant T] [--json]';

/** The flags of `fork`, checked. */
export interface ForkOptions {
  readonly nats: string | undefined;
  readonly tenant: string;
  readonly sessionId: string;
  readonly atSeq: number | undefined;
  readonly newSessionId: string | undefined;
  readonly json: boolean;
}

/** Parses and checks the flags of `fork`. */
export function parseFork(argv: string[]): ForkOptions {
  const { values, positionals } = parseArgs({
    args: argv,
    options: { nats: { type: 'string' }, tenant: { type: 'string' }, at: { type: 'string' }, as: { type: 'string' }, json: { type: 'boolean', default: false } },
    strict: true,
    allowPositionals: true,
  });
  if (positionals.length !== 1) throw new UsageError(`fork needs exactly one session id, got ${positionals.length}`);
  let atSeq: number | undefined;
  if (values.at !== undefined) {
    atSeq = Number(values.at);
    if (!/^\d+$/.test(values.at) || !Number.isSafeInteger(atSeq) || atSeq <= 0) throw new UsageError(`--at must be a log sequence (a positive whole number), got ${JSON.stringify(values.at)}`);
  }
  return {
    nats: values.nats,
    tenant: tokenArgument('--tenant', values.tenant ?? 'default'),
    sessionId: tokenArgument('the session id', positionals[0]),
    atSeq,
    newSessionId: values.as === undefined ? undefined : tokenArgument('--as', values.as),
    json: values.json,
  };
}

/**
 * `agentbus fork`: forks a session at a sequence of its log (`--at`, as `agentbus show --json` prints them; default:
 * its end) into a new session, and prints the new session's id (with `--json`, `{ sessionId, atSeq }`). The new
 * session inherits the history up to the last point at or before `--at` where every turn had ended. Exits 0 when
 * forked, 1 when the session does not exist, was deleted, `--at` is not one of its sequences, `--as` is taken, or
 * the runtime does not answer, 2 on a usage error.
 */
export async function runFork(argv: string[], context: CliContext): Promise<number> {
  const options = parseFork(argv);
  const name = `${options.tenant}/${options.sessionId}`;
  return withStackClient(context, options.nats, 'agentbus-fork', async (client) => {
    try {
      const request = { ...(options.atSeq === undefined ? {} : { atSeq: options.atSeq }), ...(options.newSessionId === undefined ? {} : { sessionId: options.newSessionId }) };
      const forked = await client.forkSession({ tenant: options.tenant, sessionId: options.sessionId }, request, { signal: context.signal, timeoutMs: 30_000 });
      context.stdout.write(options.json ? `${JSON.stringify(forked)}\n` : `${forked.sessionId}\n`);
      if (!options.json && options.atSeq !== undefined && forked.atSeq !== options.atSeq) {
        context.stderr.write(`agentbus: forked at seq ${forked.atSeq}, the last point at or before ${options.atSeq} where every turn had ended\n`);
      }
      return 0;
    } catch (error) {
      if (context.signal.aborted) return 130;
      if (error instanceof AgentbusError && error.code === ErrorCode.notFound) context.stderr.write(`agentbus: session ${name} does not exist\n`);
      else if (error instanceof AgentbusError && error.code !== ErrorCode.noResponders && error.code !== ErrorCode.timeout) context.stderr.write(`agentbus: ${error.message}\n`);
      else context.stderr.write(`agentbus: ${describeBusError(error, 'runtime')}\n`);
      return 1;
    }
  });
}
