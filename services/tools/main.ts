import type { Logger } from '../../src/logging.ts';
import { runService } from '../../src/service/index.ts';
import { DEFAULT_TOOL_SERVICE_NAME } from '../../src/tool-sdk/index.ts';
import { BWRAP_INSTALL_HINT, SANDBOX_PATH, findProgram } from '../../src/sandbox/index.ts';
import { startToolsService, toolsConfigFromEnv } from './index.ts';
import type { ToolsConfig } from './index.ts';

/** Says once, loudly, what the sandbox configuration means: no sandbox at all, or no bwrap to run one. */
async function warnAboutSandbox(config: ToolsConfig, logger: Logger): Promise<void> {
  if (config.sandbox.kind === 'none') {
    logger.warn('AGENTBUS_UNSAFE_NO_SANDBOX=1: run_command runs commands WITHOUT a sandbox; an approved command can read this worker\'s credentials and every tenant\'s files');
    return;
  }
  if ((await findProgram(config.sandbox.bwrap, SANDBOX_PATH)) === undefined) {
    logger.warn({ bwrap: config.sandbox.bwrap }, `bubblewrap is not installed: run_command will refuse every command; ${BWRAP_INSTALL_HINT}, or set AGENTBUS_UNSAFE_NO_SANDBOX=1 to run commands without a sandbox`);
  }
  if (config.sandbox.network) logger.warn('AGENTBUS_SANDBOX_NETWORK=1: sandboxed commands may use the network');
}

// The tools service as its own process: the common environment of runService, and that of toolsConfigFromEnv
// (AGENTBUS_WORKSPACE, AGENTBUS_WORKSPACE_PER_TENANT, AGENTBUS_WORKSPACE_HIDE, the sandbox's).
await runService({
  name: 'tools',
  async start({ nc, logger, env, prefix, replyPolicy, scrubber, healthFigures }) {
    const config = toolsConfigFromEnv(env, process.cwd());
    await warnAboutSandbox(config, logger);
    const service = await startToolsService({
      nc,
      logger,
      prefix,
      workspace: config.workspace,
      perTenant: config.perTenant,
      hide: config.hide,
      sandbox: config.sandbox,
      statsData: healthFigures,
      // One scrubber that knows the process's secrets: for the result ledger and $SRV.STATS.
      scrubber,
      replyPolicy,
    });
    logger.info({ workspace: config.workspace, perTenant: config.perTenant, hide: config.hide, sandbox: config.sandbox.kind }, 'tools service started');
    return { stop: () => service.stop(), health: { serviceName: DEFAULT_TOOL_SERVICE_NAME, instanceId: service.id ?? '' } };
  },
});
