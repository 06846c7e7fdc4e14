import { busOptionsFromEnv, connectBus, drainOnSignals } from '../../src/bus/connect.ts';
import { ServiceInboxPrefix } from '../../src/bus/inbox.ts';
import { createLogger } from '../../src/logging.ts';
import { secretsFromEnv } from '../../src/scrub/index.ts';
import { notifyReady } from '../../src/ready.ts';
import { readDashboardConfig, startDashboardService } from './index.ts';

// The dashboard as its own process. Env: NATS_URL, NATS_USER, NATS_PASSWORD (or NATS_TOKEN), NATS_CA/NATS_CERT/NATS_KEY (TLS),
// AGENTBUS_INBOX_PREFIX (default _INBOX_dashboard), AGENTBUS_PREFIX,
// AGENTBUS_DASHBOARD_PORT, AGENTBUS_DASHBOARD_HOST, AGENTBUS_DASHBOARD_TOKEN, LOG_LEVEL.
const logger = createLogger({ name: 'dashboard', level: process.env.LOG_LEVEL ?? 'info', secrets: secretsFromEnv(process.env) });
try {
  const config = readDashboardConfig(process.env);
  const nc = await connectBus({
    servers: process.env.NATS_URL ?? 'nats://127.0.0.1:4222',
    name: 'agentbus-dashboard',
    ...busOptionsFromEnv(process.env, ServiceInboxPrefix.dashboard),
    logger,
  });
  try {
    const dashboard = await startDashboardService({ nc, logger, prefix: process.env.AGENTBUS_PREFIX ?? 'agentbus', ...config });
    drainOnSignals(nc, logger, () => dashboard.stop());
    logger.info({ url: dashboard.url }, `dashboard started on ${dashboard.url}`);
    notifyReady('dashboard', { url: dashboard.url });
  } catch (err) {
    await nc.close();
    throw err;
  }
} catch (err) {
  logger.fatal({ err }, 'dashboard failed to start');
  process.stderr.write(`agentbus dashboard: ${err instanceof Error ? err.message : String(err)}\n`);
  process.exitCode = 1;
}
