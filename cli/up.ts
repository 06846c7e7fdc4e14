import { resolve } from 'node:path';
import { parseArgs } from 'node:util';
import { ServiceName } from './service-stack.ts';
import { removeStackFile, readStackFile, writeStackFile } from './state-dir.ts';
import { startLocalStack } from './local-stack.ts';
import { UsageError } from './context.ts';
import type { CliContext } from './context.ts';

export const UP_USAGE = 'agentbus up [--nats URL] [--services runtime,provider,tools,memory,dashboard,a2a,chat] [--script FILE] [--workspace DIR] [--dashboard-port PORT] [--agents FILE] [--verbose]';

const ALL_SERVICES: readonly ServiceName[] = Object.values(ServiceName);
/**
 * Started without --services: all but the agent protocol host, which runs when an agents config is given, and the
 * chat gateway, which runs when `--services` names it.
 */
const DEFAULT_SERVICES = ALL_SERVICES.filter((name) => name !== ServiceName.agents && name !== ServiceName.chat);

/** Parses `--services a,b`: known names, no duplicates. */
export function parseServices(value: string | undefined): ServiceName[] {
  if (value === undefined) return [...DEFAULT_SERVICES];
  const names = value.split(',').map((name) => name.trim()).filter((name) => name !== '');
  if (names.length === 0) throw new UsageError('--services needs at least one service name');
  const result: ServiceName[] = [];
  for (const name of names) {
    if (!(ALL_SERVICES as readonly string[]).includes(name)) throw new UsageError(`unknown service "${name}"; available: ${ALL_SERVICES.join(', ')}`);
    if (!result.includes(name as ServiceName)) result.push(name as ServiceName);
  }
  return result;
}

/** Checks `--dashboard-port` / `AGENTBUS_DASHBOARD_PORT`: a port 0-65535, 0 for any free one. */
export function parseDashboardPort(value: string): number {
  const port = Number(value);
  if (value.trim() === '' || !Number.isInteger(port) || port < 0 || port > 65_535) {
    throw new UsageError(`--dashboard-port must be a port number 0-65535 (0 picks a free one), got ${JSON.stringify(value)}`);
  }
  return port;
}

/** `agentbus up`: runs the services (and an embedded nats-server) until SIGINT/SIGTERM. */
export async function runUp(argv: string[], context: CliContext): Promise<number> {
  const { values } = parseArgs({
    args: argv,
    options: {
      nats: { type: 'string' },
      services: { type: 'string' },
      script: { type: 'string' },
      workspace: { type: 'string' },
      'dashboard-port': { type: 'string' },
      agents: { type: 'string' },
      verbose: { type: 'boolean', default: false },
    },
    strict: true,
    allowPositionals: false,
  });
  const services = parseServices(values.services);
  const agents = values.agents === undefined ? context.env.AGENTBUS_AGENTS : resolve(context.cwd, values.agents);
  if (agents && (values.agents !== undefined || values.services === undefined) && !services.includes(ServiceName.agents)) services.push(ServiceName.agents);
  const dashboardPort = values['dashboard-port'] ?? context.env.AGENTBUS_DASHBOARD_PORT;
  if (dashboardPort !== undefined) parseDashboardPort(dashboardPort);
  const url = values.nats ?? context.env.NATS_URL;
  if (!url) {
    const running = await readStackFile(context.stateDir);
    if (running) throw new UsageError(`agentbus up already runs here (pid ${running.pid}, ${running.url}); stop it first or pass --nats`);
  }
  const log = (line: string) => context.stderr.write(`${line}\n`);
  const stack = await startLocalStack({
    ...(url ? { url } : {}),
    stateDir: context.stateDir,
    services,
    ...(values.script ? { script: values.script } : {}),
    workspace: values.workspace ?? context.cwd,
    env: { ...context.env, ...(dashboardPort === undefined ? {} : { AGENTBUS_DASHBOARD_PORT: dashboardPort }), ...(agents ? { AGENTBUS_AGENTS: agents } : {}) },
    logs: { verbose: values.verbose, write: log, cwd: context.cwd },
    onRestart: (service, code, attempt) => log(`the ${service} service exited (code ${code}); starting it again (restart ${attempt} within a minute)`),
    onNotice: (message) => context.stderr.write(`agentbus: ${message}\n`),
    signal: context.signal,
  });
  if (stack.embedded) {
    const token = stack.token === undefined ? {} : { token: stack.token };
    await writeStackFile(context.stateDir, { url: stack.url, pid: process.pid, startedAt: new Date().toISOString(), ...token });
  }
  log(`agentbus is up on ${stack.url}${stack.embedded ? ' (embedded nats-server, data in .agentbus/)' : ''}: ${services.join(', ')}`);
  const dashboard = stack.services.urls.get(ServiceName.dashboard);
  // Opened once with its token, the page keeps it in a cookie; only this terminal's user sees the URL.
  if (dashboard) log(`dashboard: ${stack.dashboardToken ? `${dashboard}?token=${encodeURIComponent(stack.dashboardToken)}` : dashboard}`);
  const a2a = stack.services.urls.get(ServiceName.a2a);
  if (a2a) log(`A2A: ${a2a}/.well-known/agent-card.json${stack.a2aToken ? ` (calls need Authorization: Bearer ${stack.a2aToken})` : ''}`);
  const chat = stack.services.urls.get(ServiceName.chat);
  if (chat) log(`chat gateway (AI SDK useChat, tenant ${context.env.AGENTBUS_CHAT_TENANT?.trim() || 'default'}): ${chat}/api/chat with Authorization: Bearer ${stack.chatToken}`);
  log(`try: npx agentbus ask "What is in this folder?"   ·   watch: npx agentbus tail   ·   stop: Ctrl-C`);
  const stopped = new Promise<'signal'>((resolve) => context.signal.addEventListener('abort', () => resolve('signal'), { once: true }));
  const outcome = await Promise.race([stopped, stack.services.exited]);
  log('stopping…');
  await stack.stop();
  if (stack.embedded) await removeStackFile(context.stateDir, process.pid);
  if (outcome === 'signal') return 0;
  log(`the ${outcome.service} service keeps exiting (last code ${outcome.code}); stopped everything`);
  return 1;
}
