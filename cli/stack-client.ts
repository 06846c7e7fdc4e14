import type { NatsConnection } from '@nats-io/nats-core';
import { createAgentbusClient } from '../src/client/index.ts';
import type { AgentbusClient } from '../src/client/index.ts';
import { AgentbusError, ErrorCode } from '../src/errors.ts';
import { TOKEN_PATTERN, isToken, prefixFromEnv } from '../src/protocol/index.ts';
import { findBus } from './bus-target.ts';
import { connectCli } from './connect.ts';
import { UsageError } from './context.ts';
import type { CliContext } from './context.ts';

/**
 * Runs `use` with an SDK client on the bus of `--nats`, `NATS_URL` or the stack `agentbus up` runs from this
 * folder (as `agentbus tail` does: a usage error when there is none), and closes the connection after.
 */
export async function withStackClient<T>(context: CliContext, nats: string | undefined, name: string, use: (client: AgentbusClient) => Promise<T>): Promise<T> {
  const target = await findBus(context, nats);
  if (target.kind === 'none') throw new UsageError('no agentbus stack runs here: start one with `npx agentbus up`, or pass --nats URL');
  const nc: NatsConnection = await connectCli(target.url, name, target.env);
  try {
    return await use(createAgentbusClient({ nc, prefix: prefixFromEnv(context.env) }));
  } finally {
    await nc.close().catch(() => undefined);
  }
}

/** One line for an error a sessions command got from the bus, naming the service that did not answer. */
export function describeBusError(error: unknown, service: 'memory' | 'runtime'): string {
  if (error instanceof AgentbusError && error.code === ErrorCode.noResponders) {
    return service === 'memory'
      ? 'no memory service answers: is `agentbus up` running with memory (the default)?'
      : 'no runtime answers: is `agentbus up` running?';
  }
  return error instanceof AgentbusError ? `${error.code}: ${error.message}` : (error as Error).message;
}

/** Checks a `[A-Za-z0-9_-]{1,64}` flag or argument, or throws a usage error naming it. */
export function tokenArgument(what: string, value: string | undefined): string {
  if (!isToken(value)) throw new UsageError(`${what} must match ${TOKEN_PATTERN.source.slice(1, -1)}, got ${JSON.stringify(value)}`);
  return value;
}
