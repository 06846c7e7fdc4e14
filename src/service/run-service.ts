import type { NatsConnection } from '@nats-io/nats-core';
import { busOptionsFromEnv, connectBus } from '../bus/connect.ts';
import { ServiceInboxPrefix } from '../bus/inbox.ts';
import { busStartingWaitMs, connectWhenUp } from './connect-when-up.ts';
import { replyPolicyFromBus } from '../bus/reply-guard.ts';
import type { ReplyPolicy } from '../bus/reply-guard.ts';
import { startServiceHealth } from '../bus/service-health.ts';
import type { ServiceHealth, ServiceHealthFigures } from '../bus/service-health.ts';
import { createLogger } from '../logging.ts';
import type { Logger } from '../logging.ts';
import { prefixFromEnv } from '../protocol/index.ts';
import { notifyReady } from '../ready.ts';
import { createScrubber, secretsFromEnv } from '../scrub/index.ts';
import type { Scrubber } from '../scrub/index.ts';
import { startTracing } from '../telemetry/index.ts';

/** The services that run as processes of their own, by the inbox prefix they are given. */
export type ServiceProcessName = Exclude<keyof typeof ServiceInboxPrefix, 'hooks'>;

/** The server a service connects to when `NATS_URL` is not set. */
export const DEFAULT_NATS_URL = 'nats://127.0.0.1:4222';

/** How long a service may take to stop (its own stop, then the drain) before it exits anyway, non-zero. */
export const STOP_TIMEOUT_MS = 8_000;

/**
 * How long a service that stopped cleanly may still take to leave on its own. Past it the process exits, after it
 * logged what was still open (a handle nobody closed is a bug to fix, not to hide), so that a supervisor never has
 * to SIGKILL it.
 */
export const EXIT_GRACE_MS = 1_000;

/** What {@link runService} gives the service it starts: what every `main.ts` used to set up by itself. */
export interface ServiceContext {
  readonly nc: NatsConnection;
  readonly logger: Logger;
  readonly env: NodeJS.ProcessEnv;
  /** The bus's subject prefix (`AGENTBUS_PREFIX`, default `agentbus`). */
  readonly prefix: string;
  /** Which reply subjects the service answers: sealed when it logs in as a user (see `replyPolicyFromBus`). */
  readonly replyPolicy: ReplyPolicy;
  /** Knows the process's secrets (`secretsFromEnv`): for tool output, the result ledger and `$SRV.STATS`. */
  readonly scrubber: Scrubber;
  /** The health figures of the `$SRV` probe, once it runs: pass them as the service's `statsData`. */
  readonly healthFigures: () => Partial<ServiceHealthFigures>;
  /** The service cannot serve and a reconnect did not help: logs and exits 1, so that a supervisor starts it anew. */
  readonly unrecoverable: (reason: string) => void;
}

/** A started service, as {@link RunServiceOptions.start} returns it. */
export interface StartedService {
  /** Stops serving and lets go of what the service opened; the connection is drained after it. */
  stop(): Promise<void>;
  /** The `$SRV` name and instance id to probe its health on; none for a service that watches its own (the runtime) or has none. */
  readonly health?: { readonly serviceName: string; readonly instanceId: string };
  /** Resolves when it serves (memory: once it read the log); default at once. */
  readonly ready?: Promise<unknown>;
  /** Where it serves HTTP, told to the parent with the ready message (the dashboard). */
  readonly url?: string;
}

/** Options of {@link runService}. */
export interface RunServiceOptions {
  readonly name: ServiceProcessName;
  /** Starts the service on the connection. A throw is fatal: logged, the connection closed, exit code 1. */
  readonly start: (context: ServiceContext) => Promise<StartedService>;
  /** Default `process.env`. */
  readonly env?: NodeJS.ProcessEnv;
}

/**
 * Runs a service as its own process, the one way every `main.ts` starts: reads the common environment (`NATS_URL`,
 * `NATS_USER`/`NATS_PASSWORD` or `NATS_TOKEN`, `NATS_CA`/`NATS_CERT`/`NATS_KEY`, `AGENTBUS_INBOX_PREFIX`,
 * `AGENTBUS_TRUSTED_INBOXES`, `AGENTBUS_PREFIX`, `LOG_LEVEL` default `info`, `AGENTBUS_BUS_STARTING_MS`), connects, starts the service, then
 * its health probe, tells a parent it is ready, and on SIGTERM or SIGINT (or its parent gone) stops the service,
 * drains the connection and exits. Resolves once the service is ready, or failed to start (exit code 1).
 *
 * @example
 * await runService({ name: 'provider', start: (context) => startProviderProcess(context) });
 */
export async function runService(options: RunServiceOptions): Promise<void> {
  const env = options.env ?? process.env;
  const secrets = secretsFromEnv(env);
  const logger = createLogger({ name: options.name, level: env.LOG_LEVEL?.trim() || 'info', secrets });
  let nc: NatsConnection | undefined;
  try {
    // Off (and nothing of OpenTelemetry loaded) unless OTEL_EXPORTER_OTLP_ENDPOINT or OTEL_TRACES_EXPORTER says otherwise.
    const tracing = await startTracing({ serviceName: `agentbus-${options.name}`, env, logger });
    const bus = busOptionsFromEnv(env, ServiceInboxPrefix[options.name]);
    // A bad AGENTBUS_TRUSTED_INBOXES stops the service before it connects.
    const replyPolicy = replyPolicyFromBus(bus, env);
    const prefix = prefixFromEnv(env);
    // Started beside its bus (`agentbus ask`, `up`), a service may be ready to connect before the server listens.
    nc = await connectWhenUp(() => connectBus({ servers: env.NATS_URL?.trim() || DEFAULT_NATS_URL, name: `agentbus-${options.name}`, logger, ...bus }), { waitMs: busStartingWaitMs(env) });
    const connection = nc;
    let health: ServiceHealth | undefined;
    const unrecoverable = (reason: string) => {
      logger.fatal({ reason }, `${options.name} cannot serve; exiting`);
      process.exit(1);
    };
    const service = await options.start({
      nc: connection,
      logger,
      env,
      prefix,
      replyPolicy,
      scrubber: createScrubber({ secrets, logger }),
      healthFigures: () => ({ ...health?.figures() }),
      unrecoverable,
    });
    if (service.health) health = startServiceHealth({ nc: connection, logger, ...service.health, onUnrecoverable: unrecoverable });
    stopOnSignals(logger, async () => {
      health?.stop();
      await service.stop();
      await connection.drain();
      await tracing.shutdown();
    });
    void connection.closed().then((err) => {
      if (err) logger.error({ err }, 'connection closed with an error');
    });
    await service.ready;
    logger.info({ ...(service.url === undefined ? {} : { url: service.url }) }, `${options.name} service ready`);
    notifyReady(options.name, service.url === undefined ? {} : { url: service.url });
  } catch (err) {
    logger.fatal({ err }, `${options.name} service failed to start`);
    process.stderr.write(`agentbus ${options.name}: ${err instanceof Error ? err.message : String(err)}\n`);
    process.exitCode = 1;
    await nc?.close().catch(() => undefined);
  }
}

/**
 * The one shutdown path: on the first SIGTERM or SIGINT runs `stop`, bounded by {@link STOP_TIMEOUT_MS}; later
 * signals are ignored (Ctrl-C in `agentbus up` reaches a service twice: from the terminal, then from the supervisor).
 * Once stopped, the process leaves as soon as nothing holds its event loop; past {@link EXIT_GRACE_MS} it logs what
 * still does and exits.
 */
function stopOnSignals(logger: Logger, stop: () => Promise<void>): void {
  let stopping = false;
  const onSignal = (signal: NodeJS.Signals) => {
    if (stopping) return;
    stopping = true;
    logger.info({ signal }, 'stopping');
    const deadline = setTimeout(() => {
      logger.error({ timeoutMs: STOP_TIMEOUT_MS, open: process.getActiveResourcesInfo() }, 'stopping took too long; exiting');
      process.exit(1);
    }, STOP_TIMEOUT_MS);
    deadline.unref();
    stop().then(
      () => {
        clearTimeout(deadline);
        logger.info('stopped');
        // Unref'd: it fires only when something else still holds the loop.
        setTimeout(() => {
          logger.warn({ open: process.getActiveResourcesInfo() }, `still running ${EXIT_GRACE_MS} ms after it stopped; exiting`);
          process.exit();
        }, EXIT_GRACE_MS).unref();
      },
      (err: unknown) => {
        clearTimeout(deadline);
        logger.error({ err }, 'stopping failed; exiting');
        process.exit(1);
      },
    );
  };
  process.on('SIGTERM', onSignal);
  process.on('SIGINT', onSignal);
}
