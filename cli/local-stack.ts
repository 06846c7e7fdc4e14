import { randomBytes } from 'node:crypto';
import { join, relative, resolve } from 'node:path';
import { fileURLToPath } from 'node:url';
import { describeDefaultModel } from '../src/default-model.ts';
import { freePort } from '../src/nats-server.ts';
import { BUS_STARTING_ENV } from '../src/service/connect-when-up.ts';
import { embeddedBusEnv, newEmbeddedToken, startEmbeddedNats } from './embedded-nats.ts';
import type { EmbeddedNats } from './embedded-nats.ts';
import { openServiceLogs } from './service-logs.ts';
import type { ServiceLogs } from './service-logs.ts';
import { startServiceStack } from './service-stack.ts';
import { makePrivateDir } from './state-dir.ts';
import type { ServiceName, ServiceStack } from './service-stack.ts';

/** The demo script that ships with agentbus; the scripted provider plays it when no other is given. */
export const DEMO_SCRIPT = fileURLToPath(new URL('../examples/demo-script.json', import.meta.url));

/** How long services started beside an embedded bus wait for it to listen: its own start timeout. */
const BUS_START_WAIT_MS = 15_000;

/** A bus (embedded or given) with agentbus services on it. */
export interface LocalStack {
  readonly url: string;
  readonly embedded: boolean;
  /** The embedded server's token, which a client connects with (`embeddedBusEnv`); undefined on a given bus. */
  readonly token: string | undefined;
  /**
   * The dashboard's token on the embedded bus (`AGENTBUS_DASHBOARD_TOKEN`, made per start unless the environment sets
   * one): the dashboard shows every session, and other users of the machine reach its loopback port too.
   */
  readonly dashboardToken: string | undefined;
  /** The chat gateway's Bearer token (`AGENTBUS_CHAT_TOKEN`, made per start unless set) when the stack runs it. */
  readonly chatToken: string | undefined;

  /** The A2A server's bearer token on the embedded bus (`AGENTBUS_A2A_TOKEN`, made per start likewise). */
  readonly a2aToken: string | undefined;
  readonly services: ServiceStack;
  stop(): Promise<void>;
}

/** Options of {@link startLocalStack}. */
export interface LocalStackOptions {
  /** A running NATS to use; without one an embedded nats-server starts with data in `stateDir`. */
  readonly url?: string;
  readonly stateDir: string;
  readonly services: readonly ServiceName[];
  readonly script?: string;
  readonly workspace: string;
  readonly env: NodeJS.ProcessEnv;
  readonly logLevel?: string;
  /** Hears every output line of the services (besides {@link LocalStackOptions.logs}). */
  readonly onLog?: (service: ServiceName, line: string) => void;
  /**
   * The services' logs in `<stateDir>/logs/<service>.log`, said once through `write`; on the terminal (`write`) go
   * every line when `verbose`, else one human line per warning or error.
   */
  readonly logs?: { readonly verbose: boolean; readonly write: (line: string) => void; readonly cwd: string };
  /** Hears each restart of a service that exited on its own. */
  readonly onRestart?: (service: ServiceName, code: number | null, attempt: number) => void;
  /** Told once which default model the stack uses, and whether that is the offline scripted one. */
  readonly onNotice?: (message: string) => void;
  readonly signal?: AbortSignal;
}

/**
 * Starts the bus (when none is given) and the services; `stop()` takes both down in order. An embedded bus and the
 * services start side by side: its port and token are chosen first, and the services wait for it to listen
 * ({@link BUS_STARTING_ENV}), so that a cold start costs the slower of the two, not their sum.
 */
export async function startLocalStack(options: LocalStackOptions): Promise<LocalStack> {
  // Stops whatever is starting when the other half fails: services waiting for a bus that will not come, say.
  const failed = new AbortController();
  const signal = options.signal ? AbortSignal.any([options.signal, failed.signal]) : failed.signal;
  let natsStarting: Promise<EmbeddedNats> | undefined;
  let embedded: { url: string; token: string } | undefined;
  if (!options.url) {
    await makePrivateDir(options.stateDir);
    const port = await freePort();
    embedded = { url: `nats://127.0.0.1:${port}`, token: newEmbeddedToken() };
    natsStarting = startEmbeddedNats({ stateDir: options.stateDir, port, token: embedded.token, signal });
    natsStarting.catch(() => failed.abort());
  }
  const url = options.url ?? embedded!.url;
  let nats: EmbeddedNats | undefined;
  let logs: ServiceLogs | undefined;
  let shownLogs = '';
  let busFailed = false;
  try {
    // The runtime needs the same default model the provider service derives from keys and config.
    const choice = await describeDefaultModel(options.env, options.signal ? { signal: options.signal } : {});
    options.onNotice?.(choice.offline ? choice.message : `default model ${choice.model} (${choice.source})`);
    const dashboardToken = embedded ? options.env.AGENTBUS_DASHBOARD_TOKEN?.trim() || randomBytes(32).toString('base64url') : undefined;
    // The chat gateway prompts on a tenant's behalf: never without a token, made per start unless one is set.
    const chatToken = options.services.includes('chat') ? options.env.AGENTBUS_CHAT_TOKEN?.trim() || randomBytes(32).toString('base64url') : undefined;

    // The A2A server runs the agent (and its tools) for whoever calls it: on the embedded bus it asks for a token too.
    const a2aToken = embedded && options.services.includes('a2a') ? options.env.AGENTBUS_A2A_TOKEN?.trim() || randomBytes(32).toString('base64url') : undefined;
    const env: Record<string, string> = {
      AGENTBUS_MODEL: choice.model,
      NATS_URL: url,
      // In the environment, not on a command line: `ps` shows other users the command lines.
      ...(embedded ? { ...embeddedBusEnv(embedded.token), [BUS_STARTING_ENV]: String(BUS_START_WAIT_MS) } : {}),
      AGENTBUS_SCRIPT: options.script ?? options.env.AGENTBUS_SCRIPT ?? DEMO_SCRIPT,
      AGENTBUS_WORKSPACE: options.env.AGENTBUS_WORKSPACE ?? options.workspace,
      // The embedded bus is one user's own, serving the folder it runs in: one workspace, as the README's first
      // `ask` expects. On a bus of its own (--nats, NATS_URL) tenants may be many: each gets its own folder.
      AGENTBUS_WORKSPACE_PER_TENANT: options.env.AGENTBUS_WORKSPACE_PER_TENANT ?? (embedded ? '0' : '1'),
      // The embedded bus's store and token are in the state folder, often inside the workspace: hidden from the tools.
      AGENTBUS_WORKSPACE_HIDE: [...(embedded ? [resolve(options.stateDir)] : []), options.env.AGENTBUS_WORKSPACE_HIDE ?? ''].filter((path) => path !== '').join(':'),
      LOG_LEVEL: options.logLevel ?? options.env.LOG_LEVEL ?? 'info',
      ...(options.env.AGENTBUS_AGENTS ? { AGENTBUS_AGENTS: options.env.AGENTBUS_AGENTS } : {}),
      ...(options.env.AGENTBUS_DASHBOARD_PORT === undefined ? {} : { AGENTBUS_DASHBOARD_PORT: options.env.AGENTBUS_DASHBOARD_PORT }),
      // The bus lets in only the token's holder; the dashboard, which shows every session, likewise.
      ...(dashboardToken ? { AGENTBUS_DASHBOARD_TOKEN: dashboardToken } : {}),
      ...(chatToken ? { AGENTBUS_CHAT_TOKEN: chatToken } : {}),

      ...(a2aToken ? { AGENTBUS_A2A_TOKEN: a2aToken } : {}),
    };
    if (options.logs) {
      const dir = join(options.stateDir, 'logs');
      logs = openServiceLogs({ dir, services: options.services, verbose: options.logs.verbose, write: options.logs.write });
      shownLogs = `${relative(options.logs.cwd, dir) || dir}/`;
      options.logs.write(options.logs.verbose ? `agentbus: service logs here and in ${shownLogs}` : `agentbus: service logs go to ${shownLogs} (--verbose shows them here)`);
    }
    const sink = logs;
    const servicesStarting = startServiceStack({
      services: options.services,
      env,
      onLog: (service, line) => {
        sink?.onLog(service, line);
        options.onLog?.(service, line);
      },
      ...(options.onRestart ? { onRestart: options.onRestart } : {}),
      signal,
    });
    servicesStarting.catch(() => failed.abort());
    // Both settle before anything is thrown: the half that did start is stopped below.
    const [busOutcome, servicesOutcome] = await Promise.allSettled([natsStarting ?? Promise.resolve(undefined), servicesStarting]);
    if (busOutcome.status === 'fulfilled') nats = busOutcome.value;
    if (busOutcome.status === 'rejected') {
      if (servicesOutcome.status === 'fulfilled') await servicesOutcome.value.stop();
      busFailed = true;
      throw busOutcome.reason;
    }
    if (servicesOutcome.status === 'rejected') throw servicesOutcome.reason;
    const services = servicesOutcome.value;
    return {
      url,
      embedded: embedded !== undefined,
      token: embedded?.token,
      dashboardToken,
      chatToken,

      a2aToken,
      services,
      async stop() {
        await services.stop();
        await nats?.stop();
        await sink?.close();
      },
    };
  } catch (error) {
    // A bus still starting when the services failed is stopped once it is up.
    nats ??= await natsStarting?.catch(() => undefined);
    await nats?.stop();
    await logs?.close();
    // In quiet mode the service's own words (a stack trace, say) are in its file, not on the terminal.
    if (logs && !options.logs?.verbose && !busFailed && error instanceof Error) error.message += `; its log is in ${shownLogs}`;
    throw error;
  }
}
