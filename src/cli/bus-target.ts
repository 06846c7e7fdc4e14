import { readStackFile } from './state-dir.ts';
import type { CliContext } from './context.ts';

/** Where a command finds its bus: a given URL, the stack `agentbus up` runs here, or none. */
export type BusTarget = { kind: 'url'; url: string; source: '--nats' | 'NATS_URL' | 'agentbus up' } | { kind: 'none' };

/** `--nats`, then `NATS_URL`, then the stack `agentbus up` runs from this folder. */
export async function findBus(context: CliContext, flag: string | undefined): Promise<BusTarget> {
  if (flag) return { kind: 'url', url: flag, source: '--nats' };
  const fromEnv = context.env.NATS_URL;
  if (fromEnv) return { kind: 'url', url: fromEnv, source: 'NATS_URL' };
  const stack = await readStackFile(context.stateDir);
  if (stack) return { kind: 'url', url: stack.url, source: 'agentbus up' };
  return { kind: 'none' };
}
