import { parseArgs } from 'node:util';
import { createCodec, createSubjects, decodeSessionEvent, isToken, prefixFromEnv } from '../src/protocol/index.ts';
import type { AgentEvent } from '../src/protocol/index.ts';
import { findBus } from './bus-target.ts';
import { connectCli } from './connect.ts';
import { UsageError } from './context.ts';
import type { CliContext } from './context.ts';
import { formatEvent } from './format.ts';

export const TAIL_USAGE = 'agentbus tail [--nats URL] [--tenant T] [--session S] [--deltas] [--json]';

/**
 * `agentbus tail`: follows the events of a tenant's sessions (or one session) until interrupted. A message on their
 * subjects that is not a valid event (see `decodeSessionEvent`) gets one line on stderr and is otherwise ignored.
 */
export async function runTail(argv: string[], context: CliContext): Promise<number> {
  const { values } = parseArgs({
    args: argv,
    options: {
      nats: { type: 'string' },
      tenant: { type: 'string' },
      session: { type: 'string' },
      json: { type: 'boolean', default: false },
      deltas: { type: 'boolean', default: false },
    },
    strict: true,
    allowPositionals: false,
  });
  const tenant = values.tenant ?? 'default';
  if (!isToken(tenant)) throw new UsageError(`--tenant must match [A-Za-z0-9_-]{1,64}, got ${JSON.stringify(tenant)}`);
  if (values.session !== undefined && !isToken(values.session)) {
    throw new UsageError(`--session must match [A-Za-z0-9_-]{1,64}, got ${JSON.stringify(values.session)}`);
  }
  const target = await findBus(context, values.nats);
  if (target.kind === 'none') {
    throw new UsageError('no agentbus stack runs here: start one with `npx agentbus up`, or pass --nats URL');
  }
  const subjects = createSubjects(prefixFromEnv(context.env));
  const subject = `${subjects.prefix}.${tenant}.sessions.${values.session ?? '*'}.>`;
  const nc = await connectCli(target.url, 'agentbus-tail', target.env, { reconnectForever: true });
  const codec = createCodec();
  context.stderr.write(`following ${subject} on ${target.url} (Ctrl-C to stop)\n`);
  const subscription = nc.subscribe(subject, {
    callback: (_error, message) => {
      if (!message.subject.endsWith('.log') && !message.subject.includes('.live.')) return;
      let event: AgentEvent;
      try {
        event = decodeSessionEvent(codec, subjects, message);
      } catch (error) {
        // Anyone who may publish on a session's subjects can put anything there: say so, and go on.
        context.stderr.write(`skipped a message on ${message.subject}: ${(error as Error).message}\n`);
        return;
      }
      if (event.type === 'assistant.delta' && !values.deltas && !values.json) return;
      context.stdout.write(values.json ? `${JSON.stringify(event)}\n` : `${formatEvent(event)}\n`);
    },
  });
  await new Promise<void>((resolve) => {
    if (context.signal.aborted) return resolve();
    context.signal.addEventListener('abort', () => resolve(), { once: true });
    void nc.closed().then(() => resolve());
  });
  subscription.unsubscribe();
  await nc.close().catch(() => undefined);
  return 0;
}
