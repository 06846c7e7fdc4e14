import { parseArgs } from 'node:util';
import type { SessionSummary } from '../src/protocol/index.ts';
import { UsageError } from './context.ts';
import type { CliContext } from './context.ts';
import { describeBusError, tokenArgument, withStackClient } from './stack-client.ts';

export const SESSIONS_USAGE = 'agentbus sessions [--nats URL] [--tenant T] [--limit N] [--json]';

/** Sessions asked for per page. */
const PAGE_SIZE = 100;

/** Parses and checks the flags of `sessions`. */
export function parseSessions(argv: string[]): { nats: string | undefined; tenant: string; limit: number; json: boolean } {
  const { values } = parseArgs({
    args: argv,
    options: { nats: { type: 'string' }, tenant: { type: 'string' }, limit: { type: 'string' }, json: { type: 'boolean', default: false } },
    strict: true,
    allowPositionals: false,
  });
  let limit = Number.POSITIVE_INFINITY;
  if (values.limit !== undefined) {
    limit = Number(values.limit);
    if (!Number.isInteger(limit) || limit <= 0) throw new UsageError(`--limit must be a positive whole number, got ${JSON.stringify(values.limit)}`);
  }
  return { nats: values.nats, tenant: tokenArgument('--tenant', values.tenant ?? 'default'), limit, json: values.json };
}

/** One line of the human listing. */
function sessionLine(session: SessionSummary): string {
  const time = (ms: number) => new Date(ms).toISOString().slice(0, 19).replace('T', ' ');
  const last = (session.lastText ?? '').replace(/\s+/g, ' ').trim();
  const parent = session.forkedFrom ? `(fork of ${session.forkedFrom.sessionId} at seq ${session.forkedFrom.seq})` : undefined;
  return [session.sessionId.padEnd(24), time(session.createdAt), time(session.lastActivityAt), String(session.turns).padStart(5), `$${session.cost.toFixed(6)}`.padStart(11), ...(parent ? [parent] : []), last.length > 60 ? `${last.slice(0, 59)}…` : last]
    .join('  ')
    .trimEnd();
}

/**
 * `agentbus sessions`: lists a tenant's sessions, oldest first, paging through `sessions.list` (the memory
 * service answers). `--json` prints each as a JSON line. Exits 0, 1 when memory does not answer.
 */
export async function runSessions(argv: string[], context: CliContext): Promise<number> {
  const options = parseSessions(argv);
  return withStackClient(context, options.nats, 'agentbus-sessions', async (client) => {
    let printed = 0;
    let pageToken: string | undefined;
    try {
      if (!options.json) context.stdout.write(`${'SESSION'.padEnd(24)}  ${'CREATED'.padEnd(19)}  ${'LAST ACTIVITY'.padEnd(19)}  TURNS         COST  LAST ANSWER\n`);
      do {
        context.signal.throwIfAborted();
        const page = await client.listSessions(options.tenant, { limit: Math.min(PAGE_SIZE, options.limit - printed), ...(pageToken ? { pageToken } : {}) }, { signal: context.signal });
        for (const session of page.sessions) context.stdout.write(options.json ? `${JSON.stringify(session)}\n` : `${sessionLine(session)}\n`);
        printed += page.sessions.length;
        pageToken = page.nextPageToken;
      } while (pageToken && printed < options.limit);
    } catch (error) {
      if (context.signal.aborted) return 130;
      context.stderr.write(`agentbus: ${describeBusError(error, 'memory')}\n`);
      return 1;
    }
    if (!options.json) context.stderr.write(`${printed} session(s) of tenant ${options.tenant}${pageToken ? ' (more with a higher --limit)' : ''}\n`);
    return 0;
  });
}
