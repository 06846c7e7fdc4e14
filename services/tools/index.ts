import type { NatsConnection } from '@nats-io/nats-core';
import type { Logger } from '../../src/logging.ts';
import type { ReplyPolicy } from '../../src/bus/reply-guard.ts';
import { createCodec, createSubjects } from '../../src/protocol/index.ts';
import type { Codec } from '../../src/protocol/index.ts';
import type { Scrubber } from '../../src/scrub/index.ts';
import { createToolWorker } from '../../src/tool-sdk/index.ts';
import type { AnyToolDefinition } from '../../src/tool-sdk/index.ts';
import { createBuiltInTools } from './built-in-tools.ts';
import type { CommandSandbox } from './sandbox-config.ts';
import { createTenantWorkspaces } from './tenant-workspaces.ts';
import { createWorkspace } from './workspace.ts';

/** The version the tools service announces on `$SRV`. */
export const TOOLS_SERVICE_VERSION = '0.1.0';

/** Options of {@link startToolsService}. */
export interface ToolsServiceOptions {
  readonly nc: NatsConnection;
  readonly logger: Logger;
  /** Subject prefix; default `agentbus`. */
  readonly prefix?: string;
  /** Directory the built-in tools are rooted at; default the current directory. */
  readonly workspace?: string;
  /**
   * Give each tenant its own directory `<workspace>/<tenant>/` (made on first use), so that no tenant sees another's
   * files; default true. False shares the workspace itself between all callers: for one user's own folder.
   */
  readonly perTenant?: boolean;
  /**
   * Absolute paths hidden from the built-in tools and covered in `run_command`'s sandbox (the state folder of the stack
   * serving this workspace); each workspace's own `.agentbus` is hidden besides.
   */
  readonly hide?: readonly string[];
  /** How `run_command` isolates commands; default bubblewrap without network. */
  readonly sandbox?: CommandSandbox;
  readonly codec?: Codec;
  /** Tools served besides the built-ins. */
  readonly extraTools?: readonly AnyToolDefinition[];
  readonly maxConcurrency?: number;
  /** Health figures for the `data` of the service's `$SRV.STATS` answer. */
  readonly statsData?: () => Record<string, unknown>;
  /** Scrubs what the result ledger keeps and `$SRV.STATS` tells; `main.ts` passes one that knows the process's secrets. */
  readonly scrubber?: Scrubber;
  readonly signal?: AbortSignal;
  /** Which reply subjects calls are answered on: `replyPolicyFromBus` in `main.ts`; default read from `nc`. */
  readonly replyPolicy?: ReplyPolicy;
}

/** A running tools service. */
export interface ToolsService {
  /** The `$SRV` instance id. */
  readonly id: string | undefined;
  /** Stops taking calls, lets running ones finish briefly, leaves discovery. Does not close the connection. */
  stop(options?: { signal?: AbortSignal }): Promise<void>;
}

/**
 * Starts a tool worker with the built-in tools on an existing connection, in this process. `main.ts`
 * uses it to run the service as its own process (as `agentbus up` does); the test stack runs it in-process.
 *
 * @example
 * const tools = await startToolsService({ nc, logger, prefix: 'agentbus', workspace: '/srv/workspaces' }); // per tenant, sandboxed
 * // later
 * await tools.stop();
 */
export async function startToolsService(options: ToolsServiceOptions): Promise<ToolsService> {
  const root = options.workspace ?? process.cwd();
  const workspaceOptions = { hide: options.hide ?? [] };
  const workspace = options.perTenant === false ? createWorkspace(root, workspaceOptions) : createTenantWorkspaces(root, workspaceOptions);
  const logger = options.logger.child({ service: 'tools' });
  const worker = createToolWorker({
    nc: options.nc,
    subjects: createSubjects(options.prefix),
    codec: options.codec ?? createCodec(),
    logger,
    tools: [...createBuiltInTools(workspace, options.sandbox ? { sandbox: options.sandbox } : {}), ...(options.extraTools ?? [])],
    version: TOOLS_SERVICE_VERSION,
    description: 'agentbus built-in tools',
    metadata: { workspace: workspace.root, workspacePerTenant: String(workspace.perTenant), sandbox: options.sandbox?.kind ?? 'bubblewrap' },
    ...(options.maxConcurrency === undefined ? {} : { maxConcurrency: options.maxConcurrency }),
    ...(options.statsData ? { statsData: options.statsData } : {}),
    ...(options.scrubber ? { scrubber: options.scrubber } : {}),
    ...(options.replyPolicy ? { replyPolicy: options.replyPolicy } : {}),
  });
  await worker.start(options.signal ? { signal: options.signal } : {});
  return {
    get id() {
      return worker.id;
    },
    stop: (stopOptions) => worker.stop(stopOptions),
  };
}

export { createBuiltInTools } from './built-in-tools.ts';
export type { BuiltInToolsOptions } from './built-in-tools.ts';
export { createWorkspace } from './workspace.ts';
export type { Workspace, WorkspaceOptions, Workspaces } from './workspace.ts';
export { STATE_DIRECTORY_NAME } from './hidden-paths.ts';
export { createTenantWorkspaces } from './tenant-workspaces.ts';
export { DEFAULT_COMMAND_SANDBOX, toolsConfigFromEnv } from './sandbox-config.ts';
export type { CommandSandbox, ToolsConfig } from './sandbox-config.ts';
