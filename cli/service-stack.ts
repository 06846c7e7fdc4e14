import { spawn } from 'node:child_process';
import type { ChildProcess } from 'node:child_process';
import { isReadyMessage } from '../src/ready.ts';
import { serviceCommand } from './service-command.ts';

/** The services `agentbus up` can run, each its own process. */
export const ServiceName = {
  runtime: 'runtime',
  provider: 'provider',
  tools: 'tools',
  memory: 'memory',
  dashboard: 'dashboard',
  /** The A2A server (HTTP, `AGENTBUS_A2A_PORT`, default 4281 on loopback). */
  a2a: 'a2a',
  /** The Synadia Agent Protocol host: started only with an agents config (`--agents FILE`, `AGENTBUS_AGENTS`). */
  agents: 'agents',
  /** The chat gateway for AI SDK `useChat` front ends: started only when `--services` names it. */
  chat: 'chat',
} as const;
export type ServiceName = (typeof ServiceName)[keyof typeof ServiceName];

/** A running set of service processes. */
export interface ServiceStack {
  readonly services: readonly ServiceName[];
  /** Where services that serve HTTP can be reached (the dashboard), as they said when ready. */
  readonly urls: ReadonlyMap<ServiceName, string>;
  /** SIGTERM to every service (they drain), then waits for them to exit. */
  stop(): Promise<void>;
  /**
   * Resolves with the first service that keeps exiting on its own: one that exits after it was ready is
   * started again, unless it exited {@link RestartPolicy.maxRestarts} times within the policy's window.
   */
  readonly exited: Promise<{ service: ServiceName; code: number | null }>;
}

/** How a service that exits on its own is started again. */
export interface RestartPolicy {
  /** Restarts allowed within `windowMs` before the stack gives the service up; default 5. */
  readonly maxRestarts: number;
  readonly windowMs: number;
  /** Wait before the first restart, doubled for each further one in the window; default 500 ms. */
  readonly backoffMs: number;
}

const DEFAULT_RESTART_POLICY: RestartPolicy = { maxRestarts: 5, windowMs: 60_000, backoffMs: 500 };

/** Options of {@link startServiceStack}. */
export interface ServiceStackOptions {
  readonly services: readonly ServiceName[];
  /** Environment for every service: NATS_URL, AGENTBUS_SCRIPT, … (added to this process's). */
  readonly env: Record<string, string>;
  /** Where a service's log lines go; by default they are dropped. */
  readonly onLog?: (service: ServiceName, line: string) => void;
  /** Hears each restart of a service that exited on its own. */
  readonly onRestart?: (service: ServiceName, code: number | null, attempt: number) => void;
  readonly restart?: Partial<RestartPolicy>;
  readonly readyTimeoutMs?: number;
  readonly signal?: AbortSignal;
}

/**
 * Starts each service as its own process, all at once ({@link serviceCommand}: compiled or through tsx), and waits
 * until every one says it serves (IPC ready message). Rejects, stopping the others, when one exits or does not get ready in time.
 * Once up, a service that exits on its own (a node that found itself deaf exits 1 on purpose) is started
 * again with a growing delay, and given up when it keeps exiting.
 */
export async function startServiceStack(options: ServiceStackOptions): Promise<ServiceStack> {
  const policy: RestartPolicy = { ...DEFAULT_RESTART_POLICY, ...options.restart };
  const children = new Map<ServiceName, ChildProcess>();
  const urls = new Map<ServiceName, string>();
  let resolveExited: (value: { service: ServiceName; code: number | null }) => void = () => {};
  const exited = new Promise<{ service: ServiceName; code: number | null }>((resolve) => {
    resolveExited = resolve;
  });
  let stopping = false;
  const restartTimers = new Set<ReturnType<typeof setTimeout>>();
  const restarts = new Map<ServiceName, number[]>();

  const stop = async () => {
    stopping = true;
    for (const timer of restartTimers) clearTimeout(timer);
    await Promise.all(
      [...children.values()].map(
        (child) =>
          new Promise<void>((resolve) => {
            if (child.exitCode !== null || child.signalCode !== null) return resolve();
            const timer = setTimeout(() => child.kill('SIGKILL'), 10_000);
            child.once('exit', () => {
              clearTimeout(timer);
              resolve();
            });
            child.kill('SIGTERM');
          }),
      ),
    );
  };

  /** Spawns one service; resolves when it is ready, rejects when it exits first. */
  const launch = (service: ServiceName, restart = false): Promise<void> =>
    new Promise<void>((resolve, reject) => {
      const child = spawn(process.execPath, serviceCommand(service), {
        env: { ...process.env, ...options.env },
        stdio: ['ignore', 'pipe', 'pipe', 'ipc'],
      });
      children.set(service, child);
      let ready = false;
      let tail = '';
      const onData = (chunk: Buffer) => {
        const text = tail + chunk.toString();
        const lines = text.split('\n');
        tail = lines.pop() ?? '';
        for (const line of lines) if (line.trim() !== '') options.onLog?.(service, line);
      };
      child.stdout?.on('data', onData);
      child.stderr?.on('data', onData);
      child.on('message', (message) => {
        if (!isReadyMessage(message)) return;
        if (message.url !== undefined) urls.set(service, message.url);
        ready = true;
        resolve();
      });
      child.once('exit', (code) => {
        if (tail.trim() !== '') options.onLog?.(service, tail);
        if (!ready) reject(new Error(`the ${service} service exited (code ${code}) before it was ready`));
        if (stopping || children.get(service) !== child) return;
        if (ready || restart) supervise(service, code);
        else resolveExited({ service, code });
      });
    });

  /** Starts a service that exited after it was ready again, or gives it up when it keeps exiting. */
  const supervise = (service: ServiceName, code: number | null) => {
    const now = Date.now();
    const recent = (restarts.get(service) ?? []).filter((at) => now - at < policy.windowMs);
    if (recent.length >= policy.maxRestarts) {
      resolveExited({ service, code });
      return;
    }
    recent.push(now);
    restarts.set(service, recent);
    options.onRestart?.(service, code, recent.length);
    const timer = setTimeout(() => {
      restartTimers.delete(timer);
      if (stopping) return;
      // A restart that exits before it is ready counts as another exit, through its own exit handler.
      launch(service, true).catch(() => undefined);
    }, policy.backoffMs * 2 ** (recent.length - 1));
    restartTimers.add(timer);
  };

  options.signal?.throwIfAborted();
  const ready = options.services.map((service) => launch(service));
  // A service that exits later rejects its (already settled) ready promise; that is reported through `exited`.
  for (const promise of ready) promise.catch(() => undefined);
  const timeoutMs = options.readyTimeoutMs ?? 30_000;
  let timer: ReturnType<typeof setTimeout> | undefined;
  try {
    await Promise.race([
      Promise.all(ready),
      new Promise((_, reject) => {
        timer = setTimeout(() => reject(new Error(`services not ready within ${timeoutMs} ms`)), timeoutMs);
        const cancelled = () => reject(new Error('cancelled while starting services'));
        if (options.signal?.aborted) cancelled();
        options.signal?.addEventListener('abort', cancelled, { once: true });
      }),
    ]);
  } catch (error) {
    await stop();
    throw error;
  } finally {
    clearTimeout(timer);
  }
  return { services: options.services, urls, stop, exited };
}
