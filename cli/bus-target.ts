import { embeddedBusEnv } from './embedded-nats.ts';
import { readStackFile } from './state-dir.ts';
import type { CliContext } from './context.ts';

/**
 * Where a command finds its bus: a given URL, the stack `agentbus up` runs here, or none. `env` is the environment
 * to connect with (`connectCli`): the command's own, plus the token of the stack's embedded server.
 */
export type BusTarget = { kind: 'url'; url: string; source: '--nats' | 'NATS_URL' | 'agentbus up'; env: NodeJS.ProcessEnv } | { kind: 'none' };

/** `--nats`, then `NATS_URL`, then the stack `agentbus up` runs from this folder. */
export async function findBus(context: CliContext, flag: string | undefined): Promise<BusTarget> {
  if (flag) return { kind: 'url', url: flag, source: '--nats', env: context.env };
  const fromEnv = context.env.NATS_URL;
  if (fromEnv) return { kind: 'url', url: fromEnv, source: 'NATS_URL', env: context.env };
  const stack = await readStackFile(context.stateDir);
  if (stack) return { kind: 'url', url: stack.url, source: 'agentbus up', env: stack.token === undefined ? context.env : { ...context.env, ...embeddedBusEnv(stack.token) } };
  return { kind: 'none' };
}
