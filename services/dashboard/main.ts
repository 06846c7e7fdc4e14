import { runService } from '../../src/service/index.ts';
import { readDashboardConfig, startDashboardService } from './index.ts';

// The dashboard as its own process: the common environment of runService, and AGENTBUS_DASHBOARD_PORT,
// AGENTBUS_DASHBOARD_HOST, AGENTBUS_DASHBOARD_TOKEN.
await runService({
  name: 'dashboard',
  async start({ nc, logger, env, prefix }) {
    const dashboard = await startDashboardService({ nc, logger, prefix, ...readDashboardConfig(env) });
    logger.info({ url: dashboard.url }, `dashboard started on ${dashboard.url}`);
    return { stop: () => dashboard.stop(), url: dashboard.url };
  },
});
