import { randomBytes } from 'node:crypto';
import { resolve } from 'node:path';
import { fileURLToPath } from 'node:url';
import { describeDefaultModel } from '../src/default-model.ts';
import { embeddedBusEnv, startEmbeddedNats } from './embedded-nats.ts';
import type { EmbeddedNats } from './embedded-nats.ts';
import { startServiceStack } from './service-stack.ts';
import type { ServiceName, ServiceStack } from './service-stack.ts';

/** The demo script that ships with agentbus; the scripted provider plays it when no other is given. */
export const DEMO_SCRIPT = fileURLToPath(new URL('../examples/demo-script.json', import.meta.url));

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
  readonly onLog?: (service: ServiceName, line: string) => void;
  /** Hears each restart of a service that exited on its own. */
  readonly onRestart?: (service: ServiceName, code: number | null, attempt: number) => void;
  /** Told once which default model the stack uses, and whether that is the offline scripted one. */
  readonly onNotice?: (message: string) => void;
  readonly signal?: AbortSignal;
}

/** Starts the bus (when none is given) and the services; `stop()` takes both down in order. */
export async function startLocalStack(options: LocalStackOptions): Promise<LocalStack> {
  let nats: EmbeddedNats | undefined;
  if (!options.url) nats = await startEmbeddedNats({ stateDir: options.stateDir, ...(options.signal ? { signal: options.signal } : {}) });
  const url = options.url ?? nats!.url;
  try {
    // The runtime needs the same default model the provider service derives from keys and config.
    const choice = await describeDefaultModel(options.env, options.signal ? { signal: options.signal } : {});
    options.onNotice?.(choice.offline ? choice.message : `default model ${choice.model} (${choice.source})`);
    const dashboardToken = nats ? options.env.AGENTBUS_DASHBOARD_TOKEN?.trim() || randomBytes(32).toString('base64url') : undefined;
    const env: Record<string, string> = {
      AGENTBUS_MODEL: choice.model,
      NATS_URL: url,
      // In the environment, not on a command line: `ps` shows other users the command lines.
      ...(nats ? embeddedBusEnv(nats.token) : {}),
      AGENTBUS_SCRIPT: options.script ?? options.env.AGENTBUS_SCRIPT ?? DEMO_SCRIPT,
      AGENTBUS_WORKSPACE: options.env.AGENTBUS_WORKSPACE ?? options.workspace,
      // The embedded bus is one user's own, serving the folder it runs in: one workspace, as the README's first
      // `ask` expects. On a bus of its own (--nats, NATS_URL) tenants may be many: each gets its own folder.
      AGENTBUS_WORKSPACE_PER_TENANT: options.env.AGENTBUS_WORKSPACE_PER_TENANT ?? (nats ? '0' : '1'),
      // The embedded bus's store and token are in the state folder, often inside the workspace: hidden from the tools.
      AGENTBUS_WORKSPACE_HIDE: [...(nats ? [resolve(options.stateDir)] : []), options.env.AGENTBUS_WORKSPACE_HIDE ?? ''].filter((path) => path !== '').join(':'),
      LOG_LEVEL: options.logLevel ?? options.env.LOG_LEVEL ?? 'info',
      ...(options.env.AGENTBUS_AGENTS ? { AGENTBUS_AGENTS: options.env.AGENTBUS_AGENTS } : {}),
      ...(options.env.AGENTBUS_DASHBOARD_PORT === undefined ? {} : { AGENTBUS_DASHBOARD_PORT: options.env.AGENTBUS_DASHBOARD_PORT }),
      // The bus lets in only the token's holder; the dashboard, which shows every session, likewise.
      ...(dashboardToken ? { AGENTBUS_DASHBOARD_TOKEN: dashboardToken } : {}),
    };
    const services = await startServiceStack({
      services: options.services,
      env,
      ...(options.onLog ? { onLog: options.onLog } : {}),
      ...(options.onRestart ? { onRestart: options.onRestart } : {}),
      ...(options.signal ? { signal: options.signal } : {}),
    });
    return {
      url,
      embedded: nats !== undefined,
      token: nats?.token,
      dashboardToken,
      services,
      async stop() {
        await services.stop();
        await nats?.stop();
      },
    };
  } catch (error) {
    await nats?.stop();
    throw error;
  }
}
