import { spawn } from 'node:child_process';
import type { ChildProcess } from 'node:child_process';
import { fileURLToPath } from 'node:url';
import { isReadyMessage } from '../ready.ts';

/** The services `agentbus up` can run, each its own process. */
export const ServiceName = {
  runtime: 'runtime',
  provider: 'provider',
  tools: 'tools',
} as const;
export type ServiceName = (typeof ServiceName)[keyof typeof ServiceName];

/** Services named in DESIGN.md that this build does not ship yet. */
export const PLANNED_SERVICES: ReadonlySet<string> = new Set(['memory', 'dashboard']);

const ROOT = fileURLToPath(new URL('../..', import.meta.url));

/** A running set of service processes. */
export interface ServiceStack {
  readonly services: readonly ServiceName[];
  /** SIGTERM to every service (they drain), then waits for them to exit. */
  stop(): Promise<void>;
  /** Resolves with the name of the first service that exits on its own. */
  readonly exited: Promise<{ service: ServiceName; code: number | null }>;
}

/** Options of {@link startServiceStack}. */
export interface ServiceStackOptions {
  readonly services: readonly ServiceName[];
  /** Environment for every service: NATS_URL, AGENTBUS_SCRIPT, … (added to this process's). */
  readonly env: Record<string, string>;
  /** Where a service's log lines go; by default they are dropped. */
  readonly onLog?: (service: ServiceName, line: string) => void;
  readonly readyTimeoutMs?: number;
  readonly signal?: AbortSignal;
}

/**
 * Starts each service as `node --import tsx services/<name>/main.ts` and waits until every one says it
 * serves (IPC ready message). Rejects, stopping the others, when one exits or does not get ready in time.
 */
export async function startServiceStack(options: ServiceStackOptions): Promise<ServiceStack> {
  const tsx = import.meta.resolve('tsx');
  const children = new Map<ServiceName, ChildProcess>();
  let resolveExited: (value: { service: ServiceName; code: number | null }) => void = () => {};
  const exited = new Promise<{ service: ServiceName; code: number | null }>((resolve) => {
    resolveExited = resolve;
  });
  let stopping = false;

  const stop = async () => {
    stopping = true;
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

  const ready = options.services.map(
    (service) =>
      new Promise<void>((resolve, reject) => {
        const child = spawn(process.execPath, ['--import', tsx, `${ROOT}services/${service}/main.ts`], {
          env: { ...process.env, ...options.env },
          stdio: ['ignore', 'pipe', 'pipe', 'ipc'],
        });
        children.set(service, child);
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
          if (isReadyMessage(message)) resolve();
        });
        child.once('exit', (code) => {
          if (tail.trim() !== '') options.onLog?.(service, tail);
          reject(new Error(`the ${service} service exited (code ${code}) before it was ready`));
          if (!stopping) resolveExited({ service, code });
        });
      }),
  );
  // A service that exits later rejects its (already settled) ready promise; that is reported through `exited`.
  for (const promise of ready) promise.catch(() => undefined);
  const timeoutMs = options.readyTimeoutMs ?? 30_000;
  let timer: ReturnType<typeof setTimeout> | undefined;
  try {
    await Promise.race([
      Promise.all(ready),
      new Promise((_, reject) => {
        timer = setTimeout(() => reject(new Error(`services not ready within ${timeoutMs} ms`)), timeoutMs);
        options.signal?.addEventListener('abort', () => reject(new Error('cancelled while starting services')), { once: true });
      }),
    ]);
  } catch (error) {
    await stop();
    throw error;
  } finally {
    clearTimeout(timer);
  }
  return { services: options.services, stop, exited };
}
