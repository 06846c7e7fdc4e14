import { connect } from '@nats-io/transport-node';
import type { NatsConnection } from '@nats-io/nats-core';
import { busCredentialsFromEnv } from '../bus/connect.ts';

/** Connects a CLI command to the bus, with `NATS_USER`/`NATS_PASSWORD` or `NATS_TOKEN` when set. */
export function connectCli(url: string, name: string, env: NodeJS.ProcessEnv): Promise<NatsConnection> {
  return connect({ servers: url, name, timeout: 5000, ...busCredentialsFromEnv(env) });
}
