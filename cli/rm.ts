import { createInterface } from 'node:readline/promises';
import { parseArgs } from 'node:util';
import { AgentbusError, ErrorCode } from '../src/errors.ts';
import { UsageError } from './context.ts';
import type { CliContext } from './context.ts';
import { describeBusError, tokenArgument, withStackClient } from './stack-client.ts';

export const RM_USAGE = 'agentbus rm <session> [--nats URL] [--tenant T] [--yes]';

/** Parses and checks the flags of `rm`. */
export function parseRm(argv: string[]): { nats: string | undefined; tenant: string; sessionId: string; yes: boolean } {
  const { values, positionals } = parseArgs({
    args: argv,
    options: { nats: { type: 'string' }, tenant: { type: 'string' }, yes: { type: 'boolean', short: 'y', default: false } },
    strict: true,
    allowPositionals: true,
  });
  if (positionals.length !== 1) throw new UsageError(`rm needs exactly one session id, got ${positionals.length}`);
  return { nats: values.nats, tenant: tokenArgument('--tenant', values.tenant ?? 'default'), sessionId: tokenArgument('the session id', positionals[0]), yes: values.yes };
}

/** Asks on the terminal; true for "y" or "yes". */
async function confirm(context: CliContext, question: string): Promise<boolean> {
  const lines = createInterface({ input: context.stdin!, output: context.stderr });
  try {
    const answer = await lines.question(question, { signal: context.signal });
    return /^y(es)?$/i.test(answer.trim());
  } finally {
    lines.close();
  }
}

/**
 * `agentbus rm`: deletes a session (its log, its memory, its lease; its id is refused from then on). Asks first
 * on a terminal; elsewhere it needs `--yes`. Exits 0 when deleted (or already deleted), 1 when the session does
 * not exist, a turn runs in it (cancel it first) or the runtime does not answer, 2 on a usage error.
 */
export async function runRm(argv: string[], context: CliContext): Promise<number> {
  const options = parseRm(argv);
  const name = `${options.tenant}/${options.sessionId}`;
  if (!options.yes) {
    if (!context.stdin?.isTTY) throw new UsageError(`rm deletes ${name} for good: pass --yes to do it without a terminal to ask on`);
    if (!(await confirm(context, `delete session ${name} and everything logged of it? [y/N] `).catch(() => false))) {
      context.stderr.write('agentbus: nothing deleted\n');
      return 1;
    }
  }
  return withStackClient(context, options.nats, 'agentbus-rm', async (client) => {
    try {
      const deleted = await client.deleteSession({ tenant: options.tenant, sessionId: options.sessionId }, { signal: context.signal, timeoutMs: 30_000 });
      context.stdout.write(deleted.alreadyDeleted ? `session ${name} was already deleted (${deleted.purged} message(s) left over purged)\n` : `deleted session ${name} (${deleted.purged} logged message(s))\n`);
      return 0;
    } catch (error) {
      if (context.signal.aborted) return 130;
      if (error instanceof AgentbusError && error.code === ErrorCode.notFound) context.stderr.write(`agentbus: session ${name} does not exist\n`);
      else if (error instanceof AgentbusError && error.code === ErrorCode.busy) context.stderr.write(`agentbus: ${error.message}\n`);
      else context.stderr.write(`agentbus: ${describeBusError(error, 'runtime')}\n`);
      return 1;
    }
  });
}
